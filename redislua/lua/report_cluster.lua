-- Report, cluster part: heartbeat, cluster in-flight counts, L1 usage window, emergency, factors.
-- KEYS[1] l1 hash, KEYS[2] nodes zset, KEYS[3] cluster conn hash, KEYS[4] cfg hash (overrides)
-- ARGV: now_us|'' instance inflight ttl_us capacity threshold ratio0 ratio1 ratio2 ratio3 cost seq seq_ttl_us
-- Returns {usage, factor0..3, emergency 0/1, reason, live, remote_inflight, source, until_us,
-- config_version},
-- floats as strings; source is 'operator', 'auto' or ''; until_us the operator emergency's end
-- (0: none or until deactivated).
local now = now_us(ARGV[1])
local instance = ARGV[2]
local inflight = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
local capacity = tonumber(ARGV[5])
local thr = tonumber(ARGV[6])
local ratios = { tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]) }
local cost = tonumber(ARGV[11])
local seq = tonumber(ARGV[12])
local seq_ttl = tonumber(ARGV[13])

-- 1. heartbeat; instances silent for longer than the TTL are dead and removed.
redis.call('ZADD', KEYS[2], fmt(now), instance)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. fmt(now - ttl))
local live = redis.call('ZCARD', KEYS[2])
redis.call('PEXPIRE', KEYS[2], 60000)

-- 2. in-flight counts of the other live instances; dead instances' counts vanish.
redis.call('HSET', KEYS[3], instance, inflight)
local all = redis.call('HGETALL', KEYS[3])
local remote = 0
for i = 1, #all, 2 do
  if not redis.call('ZSCORE', KEYS[2], all[i]) then
    redis.call('HDEL', KEYS[3], all[i])
  elseif all[i] ~= instance then
    remote = remote + tonumber(all[i + 1])
  end
end
redis.call('PEXPIRE', KEYS[3], 60000)

-- Idempotent reports: the cost of a Seq already applied counts as 0 (the instance's last Seq
-- lives in the l1 hash, which is therefore written even without L1).
if not apply_seq(KEYS[1], instance, seq, seq_ttl, now) then
  cost = 0
end

local u = 0
local factors = { 1, 1, 1, 1 }
local emergency = 0
local reason = ''
if capacity > 0 then
  local v = redis.call('HMGET', KEYS[1], 'win_sec', 'win_cur', 'win_prev', 'emergency', 'emergency_reason', 'calm_since')
  local win_sec = tonumber(v[1]) or 0
  local win_cur = tonumber(v[2]) or 0
  local win_prev = tonumber(v[3]) or 0
  emergency = tonumber(v[4]) or 0
  reason = v[5] or ''
  local calm_since = tonumber(v[6]) or 0

  -- 3. usage: a two-second sliding window of admitted cost.
  local frac = math.fmod(now, 1e6)
  local sec = (now - frac) / 1e6
  if sec == win_sec then
    win_cur = win_cur + cost
  elseif sec == win_sec + 1 then
    win_prev = win_cur
    win_cur = cost
    win_sec = sec
  else
    win_prev = 0
    win_cur = cost
    win_sec = sec
  end
  local f = frac / 1e6
  local rate = win_prev * (1 - f) + win_cur
  u = rate / capacity

  -- 5. emergency: entered at the threshold, left after 10 s below threshold − 0.1.
  if u >= thr then
    emergency = 1
    reason = 'auto'
    calm_since = 0
  elseif emergency == 1 and reason == 'auto' then
    if u < thr - 0.1 then
      if calm_since == 0 then
        calm_since = now
      elseif now - calm_since >= 10000000 then
        emergency = 0
        reason = ''
        calm_since = 0
      end
    else
      calm_since = 0
    end
  end

  -- 6. factors per priority.
  for p = 0, 3 do
    if emergency == 1 then
      factors[p + 1] = ratios[p + 1]
    elseif u < 0.9 then
      factors[p + 1] = 1
    else
      factors[p + 1] = math.min(math.max(1 - (u - 0.9) / (thr - 0.9) * p / 3, 0), 1)
    end
  end

  redis.call('HSET', KEYS[1], 'win_sec', fmt(win_sec), 'win_cur', fmt(win_cur), 'win_prev', fmt(win_prev),
    'emergency', emergency, 'emergency_reason', reason, 'calm_since', fmt(calm_since))
end

if emergency ~= 1 then
  reason = ''
end
local source = ''
if emergency == 1 then
  source = 'auto'
end

-- 5b. operator emergency: wins over the automatic one (kept above), also without L1; an
-- ended one (now >= until) is cleared.
local op = redis.call('HMGET', KEYS[1], 'op_active', 'op_reason', 'op_until_us')
local had_op = op[1] and true or false
local op_until = 0
if had_op then
  op_until = tonumber(op[3]) or 0
  if op_until ~= 0 and now >= op_until then
    redis.call('HDEL', KEYS[1], 'op_active', 'op_reason', 'op_until_us')
    op_until = 0
  else
    emergency = 1
    reason = op[2] or ''
    source = 'operator'
    for p = 0, 3 do
      factors[p + 1] = ratios[p + 1]
    end
  end
end

if seq ~= 0 or capacity > 0 or had_op then
  keep_l1(KEYS[1], now)
end
local config_version = redis.call('HGET', KEYS[4], 'version') or '0'
return { fmt(u), fmt(factors[1]), fmt(factors[2]), fmt(factors[3]), fmt(factors[4]), emergency, reason, live, fmt(remote),
  source, fmt(op_until), config_version }
