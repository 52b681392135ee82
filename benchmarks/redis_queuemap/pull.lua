-- PULL: ARGV[5] id. Returns the payload, or nil if the id is unknown.
load_state(true)
local id = ARGV[5]
local v = redis.call('HGET', M, id)
if not v then
  return false
end
local payload = redis.call('HGET', P, id)
redis.call('HDEL', M, id)
redis.call('HDEL', P, id)
kill(v)
fix_all()
finish(true)
return payload
