-- Lease: take tokens from one app's L2 bucket.
-- KEYS[1] app l2 hash
-- ARGV: now_us|'' guaranteed burst factor want need warmup_us instance stats_seq stats_requests seq_ttl_us keep_ms
-- Returns {granted, remaining, retry_after_us, reason, short, borrowed, debt, prev_seq}: short is what the app
-- may borrow (need - avail when the bucket cannot cover need and no warm-up ramp is in progress,
-- else 0), borrowed and debt the record's after the refill (limiter.LeaseRequest.Unallocated,
-- limiter.Lease); prev_seq the statistics' Seq kept before this call (limiter.Lease.PrevSeq).
-- The warm-up (warmup_us > 0) follows limiter.AppPolicy.Warmup and memBucket.warm in the Go
-- memory store operation by operation, so that both stores compute the same doubles.
local now = now_us(ARGV[1])
local guaranteed = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local factor = tonumber(ARGV[4])
local want = tonumber(ARGV[5])
local need = tonumber(ARGV[6])
local warmup = tonumber(ARGV[7])
local stats_seq = tonumber(ARGV[9])

-- Statistics carried by the lease (limiter.LeaseRequest.Stats), applied once per Seq, first.
local prev_seq = 0
if stats_seq ~= 0 then
  local fresh
  fresh, prev_seq = apply_seq(KEYS[1], ARGV[8], stats_seq, tonumber(ARGV[11]), now)
  if fresh then
    redis.call('HINCRBY', KEYS[1], 'requests', ARGV[10])
  end
end

local s = load_l2(KEYS[1], burst, now)
refill(s, guaranteed, burst, factor, now)

need = math.min(need, math.floor(burst))
want = math.max(want, need)
local avail = math.floor(s.tokens)
local granted = 0
if avail >= want then
  granted = want
elseif avail >= need then
  granted = avail
end

-- Warm-up: cold (no grant for warmup_us, or none ever) starts one now; while it lasts, the total
-- granted since its start is capped by the ramp's integral, never below max(need, 1).
local ramping = false
local ramp_refused = false
local room = 0
local ramp_us = 0
local warm_drop = false
if warmup > 0 then
  if s.last_grant == nil or now - s.last_grant >= warmup then
    s.last_grant = now
    s.warm_start = now
    s.warm_granted = 0
  end
  if s.warm_start ~= nil and now - s.warm_start < warmup then
    ramping = true
    s.warm_granted = s.warm_granted or 0
    local t_us = math.max(0, now - s.warm_start)
    local t = t_us / 1e6
    local ws = warmup / 1e6
    local a = guaranteed * factor / 3
    local allow = a * t + a * t * t / ws
    allow = math.max(allow, math.max(need, 1))
    room = math.floor(allow - s.warm_granted)
    if room < need then
      granted = 0
      ramp_refused = true
      local target = s.warm_granted + need
      local e = warmup
      if a > 0 then
        local x = 2 * target / (a + math.sqrt(a * a + 4 * (a / ws) * target))
        e = math.min(e, math.ceil(x * 1e6))
      end
      ramp_us = math.max(1, e - t_us)
    elseif granted > room then
      granted = room
    end
  elseif s.warm_start ~= nil then
    warm_drop = true
  end
elseif s.warm_start ~= nil then
  warm_drop = true
end

s.tokens = s.tokens - granted
store_l2(KEYS[1], s, burst, guaranteed, warmup, tonumber(ARGV[12]))
if granted > 0 then
  s.last_grant = now
  redis.call('HINCRBY', KEYS[1], 'consumed', fmt(granted))
  if ramping then
    s.warm_granted = s.warm_granted + granted
  end
end
if s.last_grant ~= nil then
  redis.call('HSET', KEYS[1], 'last_grant', fmt(s.last_grant))
end
if ramping then
  redis.call('HSET', KEYS[1], 'warm_start', fmt(s.warm_start), 'warm_granted', fmt(s.warm_granted))
elseif warm_drop then
  redis.call('HDEL', KEYS[1], 'warm_start', 'warm_granted')
end

local remaining = math.floor(s.tokens)
if ramping then
  remaining = math.min(remaining, math.max(0, room - granted))
end

local retry_us = 0
local reason = ''
local short = 0
if granted < need then
  if avail < need and not ramping then
    short = need - avail
  end
  if avail < need then
    local rate = guaranteed * factor
    if rate > 0 then
      retry_us = math.min(9007199254740992, math.ceil((need - s.tokens) / rate * 1e6))
    else
      retry_us = 1000000
    end
  end
  if ramp_refused then
    retry_us = math.max(retry_us, ramp_us)
  end
  retry_us = math.min(9007199254740992, retry_us)
  reason = 'app_exhausted'
end
return { granted, remaining, fmt(retry_us), reason, short, fmt(s.borrowed), fmt(s.debt), fmt(prev_seq) }
