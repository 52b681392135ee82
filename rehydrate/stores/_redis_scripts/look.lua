-- LOOK and info: ARGV[5] "look" or "info", ARGV[6] id.
-- look: the payload or nil. info: {due, how, attempt} or nil.
local info = ARGV[5] == 'info'
if not info then
  load_state(true)
end
local v = redis.call('HGET', E, ARGV[6])
if not v then
  return false
end
if info then
  local _, due, how, attempt = parse(v)
  return {due, how, attempt}
end
return payload_of(v)
