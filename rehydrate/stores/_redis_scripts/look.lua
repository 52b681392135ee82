-- LOOK and info: ARGV[5] "look" or "info", ARGV[6] id.
-- look: the payload or nil. info: {due, queue, attempt} or nil.
if ARGV[5] == 'info' then
  local v = redis.call('HGET', M, ARGV[6])
  if not v then
    return false
  end
  local _, due, attempt, queue = parse_meta(v)
  return {due, queue, attempt}
end
load_state(true)
return redis.call('HGET', P, ARGV[6])
