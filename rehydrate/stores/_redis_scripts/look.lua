-- LOOK, info and look_many: ARGV[5] "look", "info" or "many", then ARGV[6] the id (look, info),
-- or ARGV[6..] the ids (many).
-- look: the payload or nil. info: {due, how, attempt} or nil. many: per id, its payload or nil.
local mode = ARGV[5]
if mode ~= 'info' then
  load_state(true)
end
if mode == 'many' then
  local out = {}
  for i = 6, #ARGV, CHUNK do
    local values = redis.call('HMGET', E, unpack(ARGV, i, math.min(i + CHUNK - 1, #ARGV)))
    for j = 1, #values do
      out[i - 6 + j] = values[j] and payload_of(values[j])
    end
  end
  return out
end
local v = redis.call('HGET', E, ARGV[6])
if not v then
  return false
end
if mode == 'info' then
  local _, due, how, attempt = parse(v)
  return {due, how, attempt}
end
return payload_of(v)
