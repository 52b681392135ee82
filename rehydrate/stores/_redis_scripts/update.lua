-- UPDATE: ARGV[5] id, ARGV[6] new payload. Returns {1, old payload}, or {0} if the id is unknown.
load_state(true)
local id = ARGV[5]
local v = redis.call('HGET', E, id)
if not v then
  return {0}
end
redis.call('HSET', E, id, sub(v, 1, HEADER) .. ARGV[6])
finish()
return {1, payload_of(v)}
