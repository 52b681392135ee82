-- PULL: ARGV[5] id, ARGV[6] "r" to remove it only if it still has the revision ARGV[7] (rev16;
-- pull_if), or "".
-- Returns the payload (1 with "r"), nil if the id is unknown, 0 (with "r") when its revision is
-- another. The comparison and the removal are in this one script: pull_if's compare-and-set.
load_state(true)
local id = ARGV[5]
local v = redis.call('HGET', E, id)
if not v then
  return false
end
if ARGV[6] == 'r' and rev_of(v) ~= ARGV[7] then
  return 0
end
redis.call('ZREM', Z, member(id, v))
redis.call('HDEL', E, id)
if claimed(v) then
  CLAIMED = -1
end
finish(true)
if ARGV[6] == 'r' then
  return 1
end
return payload_of(v)
