-- Borrow, cluster part (limiter.LeaseRequest.Unallocated; memLedger.borrow in the Go memory
-- store, operation by operation): debit L1's borrow pool and record the app's borrowing.
-- KEYS[1] l1 hash
-- ARGV: now_us|'' app app_borrowed max_borrow unallocated short
-- Returns {got, reason}: got = short or 0; reason '' or the refusal.
local now = now_us(ARGV[1])
local field = 'borrowed:' .. ARGV[2]
local app_borrowed = tonumber(ARGV[3])
local max_borrow = tonumber(ARGV[4])
local rate = tonumber(ARGV[5])
local short = tonumber(ARGV[6])

-- Reconciliation: L1's record follows the app's own borrowed (read by the lease just before).
local rec = app_borrowed
local v = redis.call('HMGET', KEYS[1], 'pool', 'pool_ts')
local pool, ts
if not v[1] then
  pool = rate
  ts = now
else
  pool = tonumber(v[1])
  ts = tonumber(v[2])
  pool = math.min(rate, pool + math.max(0, now - ts) / 1e6 * rate)
  ts = math.max(ts, now)
end

local got = 0
local reason = ''
if max_borrow - app_borrowed < short then
  reason = 'borrow_limit_exceeded'
elseif pool < short then
  reason = 'cluster_exhausted'
else
  pool = pool - short
  rec = rec + short
  got = short
end
redis.call('HSET', KEYS[1], 'pool', fmt(pool), 'pool_ts', fmt(ts))
if rec == 0 then
  redis.call('HDEL', KEYS[1], field)
else
  redis.call('HSET', KEYS[1], field, fmt(rec))
end
keep_l1(KEYS[1], now)
return { got, reason }
