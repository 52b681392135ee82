-- MIGRATE: convert a dehydrator's elements from the first format (the header ending at claim16,
-- 75 characters; <base>:s has ser but no fmt) to this one (rev16 appended), ARGV[5] elements at
-- most per call. Each element's revision becomes its seq16: the seqs of the elements present are
-- distinct, and every revision drawn later is a seq above them all. Every other script refuses
-- the dehydrator (RHFORMAT) until it is converted, so nothing moves its zset meanwhile and the
-- zset's ranks are a cursor: <base>:s's mig counts the members converted, so several clients
-- converting at once share the work and convert no element twice. Returns 1 when the dehydrator
-- is in this format (or empty), 0 when there is more to convert.
local OLD_HEADER = 75
local state = redis.call('HMGET', S, 'ser', 'fmt', 'mig')
if not state[1] or state[2] == FORMAT then
  return 1
end
local from = tonumber(state[3] or '0')
local n = tonumber(ARGV[5])
local members = redis.call('ZRANGE', Z, from, from + n - 1)
local m = #members
if m > 0 then
  local ids = {}
  for i = 1, m do
    ids[i] = sub(members[i], 17)
  end
  local values = hmget(E, ids, m)
  local pairs_ = {}
  for i = 1, m do
    local v = values[i]
    pairs_[2 * i - 1] = ids[i]
    pairs_[2 * i] = sub(v, 1, OLD_HEADER) .. sub(v, 1, 16) .. sub(v, OLD_HEADER + 1)
  end
  each_chunk('HSET', E, pairs_, 2 * m)
end
if m < n then
  redis.call('HSET', S, 'fmt', FORMAT)
  redis.call('HDEL', S, 'mig')
  return 1
end
redis.call('HSET', S, 'mig', int(from + m))
return 0
