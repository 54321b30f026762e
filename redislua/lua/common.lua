-- Shared helpers, prepended to every script (docs/design.md). Numbers are IEEE doubles, as
-- in the Go memory store; floats are stored with %.17g so that they round-trip exactly.

local function fmt(x)
  return string.format('%.17g', x)
end

-- now_us is the explicit time argument (tests) or Redis TIME, in microseconds since the epoch.
local function now_us(arg)
  if arg ~= nil and arg ~= '' then
    return tonumber(arg)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- load_l2 reads an app bucket; absent state (or a record holding only statistics) is a full bucket.
-- The warm-up fields (nil when absent) are only written by lease.lua: last_grant (the last grant
-- or warm-up start), warm_start and warm_granted (a warm-up in progress).
local function load_l2(key, burst, now)
  local v = redis.call('HMGET', key, 'tokens', 'ts', 'debt', 'borrowed', 'last_grant', 'warm_start', 'warm_granted')
  if not v[1] then
    return { tokens = burst, ts = now, debt = 0, borrowed = 0 }
  end
  return { tokens = tonumber(v[1]), ts = tonumber(v[2]), debt = tonumber(v[3]) or 0, borrowed = tonumber(v[4]) or 0,
    last_grant = tonumber(v[5]), warm_start = tonumber(v[6]), warm_granted = tonumber(v[7]) }
end

-- refill adds elapsed × guaranteed × factor and clamps to burst; what does not fit pays debt
-- (memBucket.refill: borrowing is repaid from the refill the app leaves unused).
local function refill(s, guaranteed, burst, factor, now)
  local elapsed = math.max(0, now - s.ts) / 1e6
  local tokens = s.tokens + elapsed * guaranteed * factor
  if tokens > burst then
    local over = tokens - burst
    tokens = burst
    if s.debt > 0 then
      local newdebt = s.debt - math.min(s.debt, over)
      if newdebt == 0 then
        s.borrowed = 0
      else
        s.borrowed = s.borrowed * (newdebt / s.debt)
      end
      s.debt = newdebt
    end
  end
  s.tokens = tokens
  s.ts = math.max(s.ts, now)
end

-- idle_ttl_ms is the idle lifetime of an app record: max(keep_ms, 2 × burst / guaranteed, warmup),
-- at most 30 days (a record must outlive the warm-up's idle time: a dropped record is cold).
-- keep_ms is store.RecordIdle of the caller's statistics interval (60 s when absent): the
-- record outlives the statistics still on their way to it.
local function idle_ttl_ms(burst, guaranteed, warmup_us, keep_ms)
  local ms = math.max(math.ceil(2 * burst / guaranteed * 1000), math.ceil(warmup_us / 1000), keep_ms or 60000)
  if not (ms < 2592000000) then
    return 2592000000
  end
  return math.max(60000, ms)
end

-- store_l2 writes the bucket back and renews its idle expiry. The lifetime is kept in the record
-- too, so that a Report (which carries no policy) can renew it.
local function store_l2(key, s, burst, guaranteed, warmup_us, keep_ms)
  local ttl = idle_ttl_ms(burst, guaranteed, warmup_us, keep_ms)
  redis.call('HSET', key, 'tokens', fmt(s.tokens), 'ts', fmt(s.ts), 'debt', fmt(s.debt), 'borrowed', fmt(s.borrowed),
    'ttl', ttl)
  redis.call('PEXPIRE', key, ttl)
end

-- apply_seq makes reports idempotent (limiter.Report.Seq). The hash at key keeps, per instance,
-- the last applied Seq as field "seq:<instance>" = "<seq>:<at_us>", at being the instance's last
-- numbered report. Entries older than ttl are dropped first. It returns whether the report's
-- figures are to be applied: always for seq 0 (unnumbered: nothing is kept), otherwise when seq
-- is above the kept one, which it then replaces; and the Seq kept before (0: none), which tells
-- the sender whether batches it saw acknowledged were lost (a failover to a lagging replica).
local function apply_seq(key, instance, seq, ttl, now)
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 4) == 'seq:' then
      local v = all[i + 1]
      local at = tonumber(string.sub(v, string.find(v, ':', 1, true) + 1))
      if now - at > ttl then
        redis.call('HDEL', key, all[i])
      end
    end
  end
  if seq == 0 then
    return true, 0
  end
  local field = 'seq:' .. instance
  local kept = redis.call('HGET', key, field)
  local fresh = true
  local prev = 0
  if kept then
    prev = tonumber(string.sub(kept, 1, string.find(kept, ':', 1, true) - 1))
    if seq <= prev then
      fresh = false
      seq = prev
    end
  end
  redis.call('HSET', key, field, fmt(seq) .. ':' .. fmt(now))
  return fresh, prev
end

-- keep_l1 renews the lifetime of a cluster's l1 hash: an hour after its last write, but never
-- before an operator emergency in it ends (no expiry while one set until deactivated is in force).
local function keep_l1(key, now)
  local v = redis.call('HMGET', key, 'op_active', 'op_until_us')
  if v[1] then
    local u = tonumber(v[2]) or 0
    if u == 0 then
      redis.call('PERSIST', key)
      return
    end
    if u > now then
      redis.call('PEXPIRE', key, fmt(3600000 + math.ceil((u - now) / 1000)))
      return
    end
  end
  redis.call('PEXPIRE', key, 3600000)
end
