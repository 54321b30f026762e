-- Return: give unspent tokens back to one app's L2 bucket, never above burst. No refill: ts is
-- kept, so the next lease refills the elapsed time at its own factor (a refill here would have
-- to guess L1's factor).
-- KEYS[1] app l2 hash
-- ARGV: now_us|'' guaranteed burst tokens warmup_us
local now = now_us(ARGV[1])
local guaranteed = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local tokens = tonumber(ARGV[4])
local warmup = tonumber(ARGV[5])
if tokens <= 0 then
  return 0
end
local s = load_l2(KEYS[1], burst, now)
s.tokens = math.min(burst, s.tokens + tokens)
store_l2(KEYS[1], s, burst, guaranteed, warmup)
return 1
