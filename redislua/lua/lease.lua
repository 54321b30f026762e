-- Lease: take tokens from one app's L2 bucket.
-- KEYS[1] app l2 hash
-- ARGV: now_us|'' guaranteed burst factor want need
-- Returns {granted, remaining, retry_after_us, reason}.
local now = now_us(ARGV[1])
local guaranteed = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local factor = tonumber(ARGV[4])
local want = tonumber(ARGV[5])
local need = tonumber(ARGV[6])

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
s.tokens = s.tokens - granted
store_l2(KEYS[1], s, burst, guaranteed)
if granted > 0 then
  redis.call('HINCRBY', KEYS[1], 'consumed', fmt(granted))
end

local retry_us = 0
local reason = ''
if granted < need then
  local rate = guaranteed * factor
  if rate > 0 then
    retry_us = math.min(9007199254740992, math.ceil((need - s.tokens) / rate * 1e6))
  else
    retry_us = 1000000
  end
  reason = 'app_exhausted'
end
return { granted, math.floor(s.tokens), fmt(retry_us), reason }
