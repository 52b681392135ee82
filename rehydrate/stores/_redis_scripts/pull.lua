-- PULL: ARGV[5] id, ARGV[6] "u" to leave an element a worker holds (pull_unless_held) or "".
-- Returns the payload, nil if the id is unknown, or 1 (with "u") when it is claimed and its lease
-- runs.
load_state(true)
local id = ARGV[5]
local v = redis.call('HGET', E, id)
if not v then
  return false
end
if ARGV[6] == 'u' and held(v, clock()) then
  return 1
end
redis.call('ZREM', Z, member(id, v))
redis.call('HDEL', E, id)
if claimed(v) then
  CLAIMED = -1
end
finish(true)
return payload_of(v)
