-- MIGRATE: move a dehydrator's elements from an earlier layout to this one, ARGV[5] elements at
-- most per call. Earlier layouts: one HASH <base>:e of id -> decimal header .. payload and one
-- ZSET <base>:z of seq16 .. id scored by due time; the header is seq16 .. due16 .. how17 ("t" or
-- "l" and 16 digits) .. attempt10 .. claim16, then (format "2") rev16; format "1" (ser but no
-- fmt in <base>:s) had no rev16, and an element's revision becomes its seq. Elements are moved
-- in the old sorted set's order, from its head, each keeping its seq, due time, span, attempt,
-- claim and revision; what is moved is removed from the old keys, so the old set's head is the
-- cursor and several clients converting at once share the work and move no element twice. A
-- format "1" dehydrator that the version before this one had begun converting in place has mig
-- in <base>:s: its first mig members already have rev16. Every other script refuses the
-- dehydrator (RHFORMAT) until it is converted. Returns 1 when the dehydrator is in this format
-- (or empty), 0 when there is more to move.
local state = redis.call('HMGET', S, 'ser', 'fmt', 'mig')
if not state[1] or state[2] == FORMAT then
  return 1
end
load_state(false, true)
local OLD_E, OLD_Z = BASE .. ':e', BASE .. ':z'
local with_rev = tonumber(state[3] or '0') -- how many of the next members have rev16
if state[2] == '2' then
  with_rev = math.huge
end
local want = tonumber(ARGV[5])
local members = redis.call('ZRANGE', OLD_Z, 0, want - 1, 'WITHSCORES')
local m = #members / 2
if m > 0 then
  local ids, dues, seqs = {}, {}, {}
  for i = 1, m do
    ids[i] = sub(members[2 * i - 1], 17)
    dues[i] = tonumber(members[2 * i])
  end
  local values = hmget(OLD_E, ids, m)
  local scored, pairs_ = {}, {}
  for i = 1, m do
    local v, id = values[i], ids[i]
    local seq = tonumber(sub(v, 1, 16))
    local lease = sub(v, 33, 33) == 'l'
    local rev, header = seq, 75
    if i <= with_rev then
      rev, header = tonumber(sub(v, 76, 91)), 91
    end
    local value = enc(lease, seq, dues[i], tonumber(sub(v, 34, 49)), tonumber(sub(v, 50, 59)),
      tonumber(sub(v, 60, 75)), rev) .. sub(v, header + 1)
    pairs_[2 * i - 1], pairs_[2 * i] = id, value
    seqs[i] = seq
    scored[2 * i - 1], scored[2 * i] = int(dues[i]), tmember(seq, id)
  end
  each_chunk('HSET', H, pairs_, 2 * m)
  -- In the old set's order, so each member files after those already moved.
  for i = 1, m do
    tb_add({scored[2 * i - 1], scored[2 * i]}, {dues[i]}, {seqs[i]}, 1)
  end
  COUNT = COUNT + m
  redis.call('ZREMRANGEBYRANK', OLD_Z, 0, m - 1)
  each_chunk('HDEL', OLD_E, ids, m)
end
local done = m < want
if state[2] ~= '2' and state[3] then
  local left = with_rev - m
  if left > 0 then
    redis.call('HSET', S, 'mig', int(left))
  else
    redis.call('HDEL', S, 'mig')
  end
end
tb_done()
redis.call('HSET', S, 'n', int(COUNT))
if done then
  redis.call('HDEL', S, 'mig')
  redis.call('HSET', S, 'fmt', FORMAT)
  if COUNT == 0 then
    redis.call('HDEL', S, 'ser', 'fmt', 'n')
  end
  return 1
end
return 0
