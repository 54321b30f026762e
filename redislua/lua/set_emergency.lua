-- SetEmergency: sets or clears the cluster's operator emergency (limiter.Store.SetEmergency).
-- KEYS[1] l1 hash
-- ARGV: now_us|'' active(0/1) reason until_us (0: until deactivated)
-- An active emergency whose end is not after now is not set: the operator emergency is cleared.
-- Returns 1 if an operator emergency is in force afterwards, else 0.
local now = now_us(ARGV[1])
local active = tonumber(ARGV[2])
local until_us = tonumber(ARGV[4])
if active == 1 and (until_us == 0 or until_us > now) then
  redis.call('HSET', KEYS[1], 'op_active', 1, 'op_reason', ARGV[3], 'op_until_us', fmt(until_us))
  keep_l1(KEYS[1], now)
  return 1
end
if redis.call('HDEL', KEYS[1], 'op_active', 'op_reason', 'op_until_us') > 0 then
  keep_l1(KEYS[1], now)
end
return 0
