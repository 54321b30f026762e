-- Connection slots: sets one instance's holding of a scope (an app, or the cluster).
-- KEYS[1] slots hash (instance -> holding), KEYS[2] nodes zset (instance -> heartbeat µs),
-- KEYS[3] l1 hash (heard_since); all in the cluster's slot, so that liveness is known here.
-- ARGV: now_us|'' instance want limit ttl_us in_use
-- Holdings of instances whose heartbeat is older than ttl_us (or absent) are dropped; the caller
-- counts as live. Not within ttl_us of heard_since (report_cluster.lua), or before any report:
-- after a silence of the whole fleet (Redis away longer than the TTL) every instance looks dead
-- until its own next report, and a holding dropped then would be granted to another instance
-- while its requests still run. Returns {held, others}: held = max(min(want, max(limit -
-- others, 0)), in_use): the slots the caller's requests use cannot be recalled, even above a
-- lowered limit.
local now = now_us(ARGV[1])
local instance = ARGV[2]
local want = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local in_use = tonumber(ARGV[6]) or 0

-- A lease may reach Redis before any report after a silence (requests do not wait for the
-- sync loop): it starts the settling time itself, as the report does.
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. fmt(now - ttl))
local heard = tonumber(redis.call('HGET', KEYS[3], 'heard_since'))
if redis.call('ZCARD', KEYS[2]) == 0 then
  heard = now
  redis.call('HSET', KEYS[3], 'heard_since', fmt(now))
  keep_l1(KEYS[3], now)
end
local settling = heard == nil or now - heard <= ttl
local all = redis.call('HGETALL', KEYS[1])
local others = 0
for i = 1, #all, 2 do
  local inst = all[i]
  if inst ~= instance then
    local hb = tonumber(redis.call('ZSCORE', KEYS[2], inst))
    if (hb == nil or now - hb > ttl) and not settling then
      redis.call('HDEL', KEYS[1], inst)
    else
      others = others + tonumber(all[i + 1])
    end
  end
end
local held = math.max(math.min(want, math.max(limit - others, 0)), in_use)
if held > 0 then
  redis.call('HSET', KEYS[1], instance, held)
  redis.call('PEXPIRE', KEYS[1], 3600000)
else
  redis.call('HDEL', KEYS[1], instance)
end
return { held, others }
