-- PUSH of one new element (a single defer, kept lean): ARGV[5] "0", or "1" on a retried attempt,
-- then id, ttl µs, payload. Replies as push does: {1, created}, {0, id} when the id is present,
-- {2} when a retry finds the element already pushed (the same payload).
load_state(true)
local id, ttl, payload = ARGV[6], ARGV[7], ARGV[8]
local before = earliest()
local due = clock() + tonumber(ttl)
local due16 = int16(due)
local seq16 = int16(SEQ + 1)
-- HSETNX writes only a new id: the common case costs no separate lookup.
-- (The seq drawn is its revision too: seq16 again, as rev16.)
local value = seq16 .. due16 .. 't' .. int16(tonumber(ttl)) .. UNCLAIMED .. seq16 .. payload
if redis.call('HSETNX', E, id, value) == 0 then
  if ARGV[5] == '1' and payload_of(redis.call('HGET', E, id)) == payload then
    return {2}
  end
  return {0, id}
end
SEQ = SEQ + 1
redis.call('ZADD', Z, due16, seq16 .. id)
wake_if_sooner(before, due)
finish()
if before == nil then -- no element before: the dehydrator was created
  if REG then
    redis.call('SADD', REG, NAME)
  end
  return {1, 1}
end
return {1, 0}
