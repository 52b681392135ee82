-- PULL: ARGV[5] id, ARGV[6] "r" to remove it only if it still has the revision ARGV[7] (rev16;
-- pull_if), or "".
-- Returns the payload (1 with "r"), nil if the id is unknown, 0 (with "r") when its revision is
-- another. The comparison and the removal are in this one script: pull_if's compare-and-set.
load_state(true)
local id = ARGV[5]
local v = redis.call('HGET', H, id)
if not v then
  return false
end
local lease, seq, due, _, _, _, rev, at = dec(v)
if ARGV[6] == 'r' and rev ~= tonumber(ARGV[7]) then
  return 0
end
tb_rem({due}, {seq}, {id}, 1)
redis.call('HDEL', H, id)
COUNT = COUNT - 1
if lease then
  CLAIMED = -1
end
finish(true)
if ARGV[6] == 'r' then
  return 1
end
return sub(v, at)
