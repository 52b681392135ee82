-- reschedule and extend: ARGV[5] "reschedule" or "extend", ARGV[6] id, ARGV[7] ttl or lease (µs),
-- ARGV[8] attempt or "", ARGV[9] token (attempt10 .. claim16) or "". File the element anew at
-- now + ttl (reschedule: released, attempt and token kept; extend: only a claimed element under
-- that token, still claimed, its revision kept). Returns the new due time, or nil when nothing
-- was done.
load_state(true)
local extend = ARGV[5] == 'extend'
local id, ttl, want, token = ARGV[6], tonumber(ARGV[7]), ARGV[8], ARGV[9]
local v = redis.call('HGET', H, id)
if not v then
  return false
end
local lease, seq, old_due, _, attempt, claim, rev, at = dec(v)
if want ~= '' and attempt ~= tonumber(want) then
  return false
end
if token ~= '' then
  local a, c = token_parts(token)
  if a ~= attempt or c ~= claim then
    return false
  end
end
if extend and not lease then
  return false
end
local before = earliest()
local now = clock()
local due = now + ttl
if lease and not extend then
  CLAIMED = -1
end
tb_rem({old_due}, {seq}, {id}, 1)
file(1, {id}, {due}, function(_, new_seq)
  -- A lease's renewal keeps the revision: the claim's holder wrote nothing.
  return enc(extend, new_seq, due, ttl, attempt, claim, extend and rev or new_seq)
end, {sub(v, at)})
wake_if_sooner(before, due)
finish()
return due
