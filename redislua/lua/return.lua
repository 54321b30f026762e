-- Return: give unspent tokens back to one app's L2 bucket, never above burst. No refill: ts is
-- kept, so the next lease refills the elapsed time at its own factor (a refill here would have
-- to guess L1's factor).
-- KEYS[1] app l2 hash
-- ARGV: now_us|'' guaranteed burst tokens warmup_us instance stats_seq stats_requests seq_ttl_us keep_ms
-- (stats_seq to seq_ttl_us: statistics carried by the return, applied once per Seq as lease.lua
-- applies a lease's; keep_ms as lease.lua's)
local now = now_us(ARGV[1])
local guaranteed = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local tokens = tonumber(ARGV[4])
local warmup = tonumber(ARGV[5])
if tokens <= 0 then
  return 0
end
local stats_seq = tonumber(ARGV[7] or '0')
if stats_seq ~= 0 then
  local fresh = apply_seq(KEYS[1], ARGV[6], stats_seq, tonumber(ARGV[9]), now)
  if fresh then
    redis.call('HINCRBY', KEYS[1], 'requests', ARGV[8])
  end
end
local s = load_l2(KEYS[1], burst, now)
s.tokens = math.min(burst, s.tokens + tokens)
store_l2(KEYS[1], s, burst, guaranteed, warmup, tonumber(ARGV[10]))
return 1
