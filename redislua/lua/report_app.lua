-- Report, per-app part: statistics and this instance's in-flight count for one app.
-- Everything here lives in the app's hash slot. The live-instance set lives in the cluster's
-- slot, so each in-flight entry carries its own heartbeat ("count:heartbeat_us") and entries
-- older than the instance TTL are dropped here.
-- KEYS[1] app l2 hash, KEYS[2] app conn hash
-- ARGV: now_us|'' instance requests inflight ttl_us
-- Returns the in-flight total of the other live instances, as a string.
local now = now_us(ARGV[1])
local instance = ARGV[2]
local requests = tonumber(ARGV[3])
local inflight = ARGV[4]
local ttl = tonumber(ARGV[5])

if requests ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'requests', requests)
  if redis.call('PTTL', KEYS[1]) < 0 then
    redis.call('PEXPIRE', KEYS[1], 60000)
  end
end

redis.call('HSET', KEYS[2], instance, inflight .. ':' .. fmt(now))
local all = redis.call('HGETALL', KEYS[2])
local remote = 0
for i = 1, #all, 2 do
  local sep = string.find(all[i + 1], ':', 1, true)
  local count = tonumber(string.sub(all[i + 1], 1, sep - 1))
  local hb = tonumber(string.sub(all[i + 1], sep + 1))
  if now - hb > ttl then
    redis.call('HDEL', KEYS[2], all[i])
  elseif all[i] ~= instance then
    remote = remote + count
  end
end
redis.call('PEXPIRE', KEYS[2], 60000)
return fmt(remote)
