-- LOOK, info, read and look_many: ARGV[5] "look", "info", "read" or "many", then ARGV[6] the id
-- (look, info, read), or ARGV[6..] the ids (many).
-- look: the payload or nil. info: {due, how, attempt, rev} or nil. read: {payload, due, how,
-- attempt, rev} or nil, one read of both (what a compare-and-set's caller bases its write on).
-- many: per id, its payload or nil.
local mode = ARGV[5]
load_state(mode ~= 'info')
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
if mode == 'info' or mode == 'read' then
  local _, due, how, attempt, _, rev = parse(v)
  if mode == 'read' then
    return {payload_of(v), due, how, attempt, rev}
  end
  return {due, how, attempt, rev}
end
return payload_of(v)
