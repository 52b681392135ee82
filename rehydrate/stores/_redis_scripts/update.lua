-- UPDATE: ARGV[5] id, ARGV[6] new payload. Returns {1, old payload}, or {0} if the id is unknown.
load_state(true)
local id = ARGV[5]
local old = redis.call('HGET', P, id)
if not old then
  return {0}
end
redis.call('HSET', P, id, ARGV[6])
finish()
return {1, old}
