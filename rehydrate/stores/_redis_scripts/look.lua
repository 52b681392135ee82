-- LOOK, info, read and look_many: ARGV[5] "look", "info", "read" or "many", then ARGV[6] the id
-- (look, info, read), or ARGV[6..] the ids (many).
-- look: the payload or nil. info: {due, how, attempt, rev} or nil (how: "t" and the TTL the
-- element was filed with, or "l" and the lease it is claimed for, µs). read: {payload, due, how,
-- attempt, rev} or nil, one read of both (what a compare-and-set's caller bases its write on).
-- many: per id, its payload or nil.
local mode = ARGV[5]
load_state(mode ~= 'info')
if mode == 'many' then
  local out = {}
  for i = 6, #ARGV, CHUNK do
    local values = redis.call('HMGET', H, unpack(ARGV, i, math.min(i + CHUNK - 1, #ARGV)))
    for j = 1, #values do
      out[i - 6 + j] = values[j] and payload_of(values[j])
    end
  end
  return out
end
local id = ARGV[6]
local v = redis.call('HGET', H, id)
if not v then
  return false
end
local lease, _, due, span, attempt, _, rev, at = dec(v)
if mode == 'info' or mode == 'read' then
  local how = (lease and 'l' or 't') .. int(span)
  if mode == 'read' then
    return {sub(v, at), int(due), how, attempt, int(rev)}
  end
  return {int(due), how, attempt, int(rev)}
end
return sub(v, at)
