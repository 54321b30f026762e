-- Appends one entry to a cluster's audit log and drops the entry that falls out of the bound.
-- KEYS[1] audit hash: field "seq" (the newest entry's number) and one field per entry number
-- ARGV: entry max_entries
-- Returns the new entry's number.
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('HSET', KEYS[1], tostring(seq), ARGV[1])
local old = seq - tonumber(ARGV[2])
if old > 0 then
  redis.call('HDEL', KEYS[1], tostring(old))
end
return seq
