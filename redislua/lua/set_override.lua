-- Sets or removes one admin override if the cluster's overrides are still at the caller's
-- version, and moves the version to max(version + 1, now): unique even after a data loss.
-- KEYS[1] cfg hash (field "version" and one field per override)
-- ARGV: now_us|'' key value set(1|0) if_version max_entries
-- Returns {1, version} when applied, {0, version} on a version conflict, {-1, version} when a
-- new entry would exceed max_entries.
local now = now_us(ARGV[1])
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[5]) then
  return { 0, fmt(v) }
end
if ARGV[4] == '1' then
  local n = redis.call('HLEN', KEYS[1])
  if v > 0 then
    n = n - 1
  end
  if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 and n >= tonumber(ARGV[6]) then
    return { -1, fmt(v) }
  end
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
else
  redis.call('HDEL', KEYS[1], ARGV[2])
end
v = math.max(v + 1, now)
redis.call('HSET', KEYS[1], 'version', fmt(v))
return { 1, fmt(v) }
