-- Borrow, app part (limiter.LeaseRequest.Unallocated; memBucket.credit in the Go memory store):
-- after L1's pool gave b tokens, add them to the app's bucket with their debt, and grant need.
-- No refill: ts stays.
-- KEYS[1] app l2 hash
-- ARGV: now_us|'' guaranteed burst need b warmup_us repay keep_ms (as lease.lua's)
-- Returns {granted, remaining, borrowed, debt} (borrowed and debt as stored after the credit).
local now = now_us(ARGV[1])
local guaranteed = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local need = tonumber(ARGV[4])
local b = tonumber(ARGV[5])
local warmup = tonumber(ARGV[6])
local repay = tonumber(ARGV[7])

local s = load_l2(KEYS[1], burst, now)
need = math.min(need, math.floor(burst))
s.tokens = s.tokens + b
s.debt = s.debt + math.ceil(b * repay)
s.borrowed = s.borrowed + b
local granted = 0
if math.floor(s.tokens) >= need then
  granted = need
  s.tokens = s.tokens - need
end
store_l2(KEYS[1], s, burst, guaranteed, warmup, tonumber(ARGV[8]))
if granted > 0 then
  redis.call('HINCRBY', KEYS[1], 'consumed', fmt(granted))
  redis.call('HSET', KEYS[1], 'last_grant', fmt(now))
end
return { granted, math.floor(s.tokens), fmt(s.borrowed), fmt(s.debt) }
