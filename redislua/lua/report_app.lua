-- Report, per-app part: statistics and this instance's in-flight count for one app.
-- Everything here lives in the app's hash slot. The live-instance set lives in the cluster's
-- slot, so each in-flight entry carries its own heartbeat ("count:heartbeat_us") and entries
-- older than the instance TTL are dropped here.
-- KEYS[1] app l2 hash, KEYS[2] app conn hash
-- ARGV: now_us|'' instance requests inflight ttl_us seq seq_ttl_us keep_ms (as lease.lua's)
-- leaving(1|0|absent)
-- The entry of an instance lives ttl_us after the last report that carried the app (the limiter
-- carries every app with a non-zero count in every report, so this matches the instance's own
-- heartbeat).
-- Returns {the in-flight total of the other live instances, the Seq kept before this report},
-- as strings.
local now = now_us(ARGV[1])
local instance = ARGV[2]
local inflight = ARGV[4]
local ttl = tonumber(ARGV[5])
local seq = tonumber(ARGV[6])
local seq_ttl = tonumber(ARGV[7])

-- Statistics only: the tokens were debited at lease time. A Seq already applied adds nothing
-- (the app's own record keeps the instance's last Seq: this script sees no other slot). The
-- write renews the record's idle lifetime: the one its last lease stored, and at least keep_ms.
local requests = 0
local fresh, prev = apply_seq(KEYS[1], instance, seq, seq_ttl, now)
if fresh then
  requests = ARGV[3]
end
redis.call('HINCRBY', KEYS[1], 'requests', requests)
redis.call('PEXPIRE', KEYS[1], math.max(tonumber(redis.call('HGET', KEYS[1], 'ttl')) or 0, tonumber(ARGV[8]) or 60000))

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
-- A leaving instance's entry goes once the report is applied (store.Report.Leaving).
if ARGV[9] == '1' then
  redis.call('HDEL', KEYS[2], instance)
end
return { fmt(remote), fmt(prev) }
