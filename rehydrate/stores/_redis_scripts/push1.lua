-- PUSH of one new element (a single defer, kept lean): ARGV[5] "0", or "1" on a retried attempt,
-- then id, ttl µs, payload. Replies as push does: {1, created}, {0, id} when the id is present,
-- {2} when a retry finds the element already pushed (the same payload).
load_state(true)
local id, ttl, payload = ARGV[6], tonumber(ARGV[7]), ARGV[8]
local before = earliest()
local due = clock() + ttl
local seq = SEQ + 1
-- HSETNX writes only a new id: the common case costs no separate lookup. (The seq drawn is its
-- revision too.)
if redis.call('HSETNX', H, id, enc(false, seq, due, ttl, 0, 0, seq) .. payload) == 0 then
  if ARGV[5] == '1' and payload_of(redis.call('HGET', H, id)) == payload then
    return {2}
  end
  return {0, id}
end
SEQ = seq
COUNT = COUNT + 1
tb_add({int(due), tmember(seq, id)}, {due}, {seq}, 1)
wake_if_sooner(before, due)
finish()
if before == nil then -- no element before: the dehydrator was created
  if REG then
    redis.call('SADD', REG, NAME)
  end
  return {1, 1}
end
return {1, 0}
