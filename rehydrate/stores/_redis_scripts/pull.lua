-- PULL: ARGV[5] id. Returns the payload, or nil if the id is unknown.
load_state(true)
local id = ARGV[5]
local v = redis.call('HGET', E, id)
if not v then
  return false
end
redis.call('ZREM', Z, member(id, v))
redis.call('HDEL', E, id)
if claimed(v) then
  CLAIMED = -1
end
finish(true)
return payload_of(v)
