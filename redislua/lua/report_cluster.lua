-- Report, cluster part: heartbeat, cluster in-flight counts, L1 usage window, emergency, factors.
-- KEYS[1] l1 hash, KEYS[2] nodes zset, KEYS[3] cluster conn hash, KEYS[4] cfg hash (overrides),
-- KEYS[5…] (a leaving report only) the slots hashes of the cluster scope and of each app of the
-- report, all in the cluster's slot
-- ARGV: now_us|'' instance inflight ttl_us capacity threshold ratio0 ratio1 ratio2 ratio3 cost seq seq_ttl_us
-- span_us leaving(1|0) adaptive_min adaptive_max(0: static) answers throttles slow lat0..lat15
-- latency_target_ns
-- Returns {usage, factor0..3, emergency 0/1, reason, live, remote_inflight, source, until_us,
-- config_version, rejoined 0/1, capacity, capacity_source, last_period, last_change},
-- last_period 'answers throttles slow cost lat0..lat15' and last_change 'at_us from to cause'
-- (or ''),
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
local span = tonumber(ARGV[14]) or 0
local leaving = ARGV[15] == '1'
local a_min = tonumber(ARGV[16]) or 0
local a_max = tonumber(ARGV[17]) or 0
local sig = {}
for i = 18, 36 do
  sig[#sig + 1] = tonumber(ARGV[i]) or 0
end
local a_target = tonumber(ARGV[37]) or 0

-- The control law of the adaptive capacity, as package adaptive states it (law.go). prev is
-- the previous period's step (its next / its c; 1 when it held), ceil the ceiling of the last
-- decrease (0: none), since the whole periods since the capacity last changed, queued the
-- period's answers that show a queue (queued below). After a decrease, hold; so too on
-- overload or a queue (below) below the ceiling at most 2 periods after a change while the demand is above
-- 1.01 x c (the fleet has not followed the last decrease yet). On throttles above 1 % of the
-- period's answers or slow answers above 10 % (p90 over the target): the ceiling becomes the
-- healthy figure before the period (c / prev after an increase) times the share of answers
-- served times 0.95, and the capacity 0.85 of it (0.7 on throttles), at most down to 0.25 of
-- c. Queued above 25 % of the answers: c x 0.975. Slow answers above 2 %: hold. At the
-- ceiling for under 5 periods with any queued answer: hold. Else, with the demand at 0.6 of
-- the capacity, the k-th increase in a row by k x 0.025 (k <= 6; 1 again at the ceiling,
-- while the demand is under 0.75 of the capacity, and above the ceiling with any queued
-- answer), not past the ceiling from below. Else hold. Always within [mn, mx].
local function law(c, mn, mx, answers, throttles, slow, queued, demand, prev, ceil, since)
  c = math.min(math.max(c, mn), mx)
  if prev < 1 then
    return c, ceil, 'hold'
  end
  local cause = nil
  if answers > 0 and throttles > 0.01 * answers then
    cause = 'throttles'
  elseif answers > 0 and slow > 0.1 * answers then
    cause = 'latency'
  end
  if (cause or queued > 0.25 * answers) and c < ceil and since <= 2 and demand > c * 1.01 then
    return c, ceil, 'hold'
  end
  if cause then
    local served = (answers - math.min(math.max(throttles, 0), answers)) / answers
    local top = c * served / math.max(prev, 1) * 0.95
    local drain = 0.85
    if cause == 'throttles' then
      drain = 0.7
    end
    return math.max(mn, c * 0.25, drain * top), top, cause
  end
  if queued > 0.25 * answers then
    return math.max(mn, c * 0.975), ceil, 'queue'
  end
  if slow > 0.02 * answers or answers <= 0 or demand < 0.6 * c or c >= mx then
    return c, ceil, 'hold'
  end
  if c == ceil and since < 5 and queued > 0 then
    return c, ceil, 'hold'
  end
  local k = 0
  if prev > 1 then
    k = math.min(math.max(math.floor((prev - 1) / 0.025 + 0.5), 1), 5)
  end
  if c == ceil or demand < 0.75 * c or (c > ceil and queued > 0) then
    k = 0
  end
  local next_c = c * (1 + (k + 1) * 0.025)
  if c < ceil then
    next_c = math.min(next_c, ceil)
  end
  return math.min(mx, next_c), ceil, 'demand'
end

-- upper is the upper bound (ns) of sketch bucket i (the last one: its lower bound).
local function upper(i)
  return 128000 * 2 ^ math.min(i, 14)
end

-- qbase is the backend's latency without a queue, ns (adaptive.QueueBase): the lower of the
-- sketch's p2 (lat0..lat15 at lat[first..first+15]; the upper bound of the bucket that holds
-- it) and the last base x 1.05; an empty sketch grows the base, and a first one sets it.
local function qbase(lat, first, base)
  local total = 0
  for i = 0, 15 do
    total = total + lat[first + i]
  end
  if total <= 0 then
    return base * 1.05
  end
  local seen, p2 = 0, upper(15)
  for i = 0, 15 do
    seen = seen + lat[first + i]
    if seen * 100 >= total * 2 then
      p2 = upper(i)
      break
    end
  end
  if base <= 0 then
    return p2
  end
  return math.min(base * 1.05, p2)
end

-- queued counts the latencies of a sketch that show the backend queueing (adaptive.Queued):
-- those in the buckets whose upper bound is above both target / 4 and 4 x base.
local function queued(lat, first, target_ns, base)
  local from = math.max(math.floor(target_ns / 4), 4 * base)
  local n = 0
  for i = 0, 15 do
    if upper(i) > from then
      n = n + lat[first + i]
    end
  end
  return n
end

-- numbers splits a field of space-separated numbers (n of them; absent: zeros).
local function numbers(field, n)
  local out = {}
  if field then
    for x in string.gmatch(field, '%S+') do
      out[#out + 1] = tonumber(x)
    end
  end
  for i = #out + 1, n do
    out[i] = 0
  end
  return out
end

local function join(xs)
  local parts = {}
  for i = 1, #xs do
    parts[i] = fmt(xs[i])
  end
  return table.concat(parts, ' ')
end

-- 1. heartbeat; instances silent for longer than the TTL are dead and removed. Rejoined: this
-- instance was not live here before (first report, expired, or the data was lost). When no
-- instance at all was heard for the TTL (Redis was away, or the whole fleet), the others are not
-- dead but not heard yet: heard_since marks the time, and for one TTL after it the slot leases
-- keep their holdings (lease_slots.lua).
local prev_hb = tonumber(redis.call('ZSCORE', KEYS[2], instance))
local rejoined = (prev_hb == nil or now - prev_hb > ttl) and 1 or 0
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. fmt(now - ttl))
if redis.call('ZCARD', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[1], 'heard_since', fmt(now))
  keep_l1(KEYS[1], now)
end
redis.call('ZADD', KEYS[2], fmt(now), instance)
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
local fresh = apply_seq(KEYS[1], instance, seq, seq_ttl, now)
if not fresh then
  cost = 0
end

local u = 0
local cap_now = 0
local cap_source = ''
local last_period = ''
local last_change = ''
local factors = { 1, 1, 1, 1 }
local emergency = 0
local reason = ''
if capacity > 0 then
  local v = redis.call('HMGET', KEYS[1], 'emergency', 'emergency_reason', 'calm_since', 'w_slot',
    'w0', 'w1', 'w2', 'w3', 'w4', 'w5', 'w6', 'w7', 'w8', 'w9', 'w10')
  emergency = tonumber(v[1]) or 0
  reason = v[2] or ''
  local calm_since = tonumber(v[3]) or 0

  -- 3. usage: the cost of the last second, kept in eleven 100 ms slots (a ring, w<slot % 11>).
  -- A report's cost is spread evenly over the span it took to admit, ending now, and u is the
  -- larger of the last ten complete slots and the last nine with the current one
  -- (docs/design.md, "L1 usage").
  local slot = math.floor(now / 100000)
  local last = tonumber(v[4])
  local w = {}
  for i = 0, 10 do
    w[i] = tonumber(v[5 + i]) or 0
  end
  local changed = {}
  if last == nil then
    -- the first report, or the first since the two-bucket window: drop its fields
    redis.call('HDEL', KEYS[1], 'win_sec', 'win_cur', 'win_prev')
  end
  if last == nil or slot - last >= 11 then
    for i = 0, 10 do
      w[i] = 0
      changed[i] = true
    end
    last = slot
  elseif slot > last then
    for s = last + 1, slot do
      w[s % 11] = 0
      changed[s % 11] = true
    end
    last = slot
  end
  local at = math.max(now, last * 100000) -- a clock that went back counts in the latest slot
  slot = last
  if span <= 0 then
    w[slot % 11] = w[slot % 11] + cost
    changed[slot % 11] = true
  else
    local from = at - span
    for s = math.max(math.floor(from / 100000), slot - 10), slot do
      local lo = math.max(from, s * 100000)
      local hi = math.min(at, (s + 1) * 100000)
      if hi > lo then
        w[s % 11] = w[s % 11] + cost * (hi - lo) / span
        changed[s % 11] = true
      end
    end
  end
  local complete, current = 0, 0
  for s = slot - 10, slot - 1 do
    complete = complete + w[s % 11]
  end
  for s = slot - 9, slot do
    current = current + w[s % 11]
  end
  local window = math.max(complete, current)

  -- 3a. the capacity in force (memController.inForce): learned with an adaptive policy — the
  -- fresh report's signals join the period (field p: answers throttles slow lat0..lat15); a
  -- period at least 1 s old goes through the law and becomes the last one (lp, with its
  -- demand), a move is recorded (chg) — or the configured one, tracked in cap so that a
  -- learned capacity resumes from the figure in force.
  local fields = { 'w_slot', fmt(slot) }
  local cv = redis.call('HMGET', KEYS[1], 'cap', 'ctl_ts', 'p', 'lp', 'chg', 'ceil', 'qbase')
  if a_max <= 0 then
    cap_now = capacity
    cap_source = 'config'
    for _, f in ipairs({ 'cap', fmt(capacity), 'ctl_ts', fmt(now), 'p', '', 'ceil', '0', 'qbase', '0' }) do
      fields[#fields + 1] = f
    end
  else
    local c = tonumber(cv[1])
    local start = tonumber(cv[2])
    local ceil = tonumber(cv[6]) or 0
    local base = tonumber(cv[7]) or 0
    if c == nil or start == nil then
      c = capacity
      start = now
      ceil = 0
      base = 0
    end
    c = math.min(math.max(c, a_min), a_max)
    local p = numbers(cv[3], 19)
    if fresh then
      for i = 1, 19 do
        p[i] = p[i] + sig[i]
      end
    end
    last_period = cv[4] or ''
    last_change = cv[5] or ''
    if now - start >= 1000000 then
      local ch = {}
      for x in string.gmatch(last_change, '%S+') do
        ch[#ch + 1] = x
      end
      local prev = 1
      if #ch == 4 and tonumber(ch[1]) == start and tonumber(ch[2]) > 0 then
        prev = tonumber(ch[3]) / tonumber(ch[2])
      end
      local since = 2 ^ 53 -- whole periods since the capacity last changed
      if #ch == 4 and tonumber(ch[2]) > 0 then
        since = math.max(math.floor((now - tonumber(ch[1])) / 1000000), 0)
      end
      base = qbase(p, 4, base)
      local next_c, next_ceil, cause = law(c, a_min, a_max, p[1], p[2], p[3], queued(p, 4, a_target, base),
        window, prev, ceil, since)
      ceil = next_ceil
      local lp = { p[1], p[2], p[3], window }
      for i = 4, 19 do
        lp[#lp + 1] = p[i]
      end
      last_period = join(lp)
      if next_c ~= c then
        last_change = fmt(now) .. ' ' .. fmt(c) .. ' ' .. fmt(next_c) .. ' ' .. cause
      end
      c = next_c
      start = now
      for i = 1, 19 do
        p[i] = 0
      end
    end
    cap_now = c
    cap_source = 'adaptive'
    for _, f in ipairs({ 'cap', fmt(c), 'ceil', fmt(ceil), 'qbase', fmt(base), 'ctl_ts', fmt(start), 'p', join(p), 'lp', last_period, 'chg', last_change }) do
      fields[#fields + 1] = f
    end
  end
  u = window / cap_now
  for i = 0, 10 do
    if changed[i] then
      fields[#fields + 1] = 'w' .. i
      fields[#fields + 1] = fmt(w[i])
    end
  end
  redis.call('HSET', KEYS[1], unpack(fields))

  -- 5. emergency: entered at the threshold, left after 10 s below threshold − 0.1. Under a
  -- learned capacity, entered only when the last control period showed the backend refusing
  -- work, throttles above 1 % of its answers, and left 2 s (two control periods) after it
  -- stopped refusing (memLedger.updateEmergency).
  local refusing = true
  if a_max > 0 then
    local lp = numbers(last_period, 3)
    refusing = lp[1] > 0 and lp[2] > 0.01 * lp[1]
  end
  local calm = u < thr - 0.1
  local hold = 10000000
  if a_max > 0 then
    calm = not refusing
    hold = 2000000
  end
  if u >= thr and refusing then
    emergency = 1
    reason = 'auto'
    calm_since = 0
  elseif emergency == 1 and reason == 'auto' then
    if calm then
      if calm_since == 0 then
        calm_since = now
      elseif now - calm_since >= hold then
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

  redis.call('HSET', KEYS[1], 'emergency', emergency, 'emergency_reason', reason, 'calm_since', fmt(calm_since))
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

-- 7. a leaving instance (store.Report.Leaving) leaves the live set once its report is applied:
-- its heartbeat, its cluster in-flight count and its slot holdings of the scopes passed go, as
-- if its heartbeat had expired; its Seqs stay (memLedger.leave). Its entry in the nodes set is
-- given a time more than ttl ago: expired, it counts nowhere, and the next report or slot lease
-- prunes it as any expired heartbeat (step 1; with the commands of the least-privilege ACL,
-- redislua.ACLCommands).
if leaving then
  redis.call('ZADD', KEYS[2], fmt(now - ttl - 1), instance)
  redis.call('HDEL', KEYS[3], instance)
  for k = 5, #KEYS do
    redis.call('HDEL', KEYS[k], instance)
  end
end
return { fmt(u), fmt(factors[1]), fmt(factors[2]), fmt(factors[3]), fmt(factors[4]), emergency, reason, live, fmt(remote),
  source, fmt(op_until), config_version, rejoined, fmt(cap_now), cap_source, last_period, last_change }
