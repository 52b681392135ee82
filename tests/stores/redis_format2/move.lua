-- reschedule and extend: ARGV[5] "reschedule" or "extend", ARGV[6] id, ARGV[7] ttl or lease (µs),
-- ARGV[8] attempt or "", ARGV[9] token (attempt10 .. claim16) or "". File the element anew at
-- now + ttl (reschedule: released, attempt and token kept; extend: only a claimed element under
-- that token, still claimed, its revision kept). Returns the new due time, or nil when nothing
-- was done.
load_state(true)
local extend = ARGV[5] == 'extend'
local id, ttl, want, token = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local v = redis.call('HGET', E, id)
if not v then
  return false
end
local _, _, _, attempt, claim16 = parse(v)
if
  (want ~= '' and tonumber(attempt) ~= tonumber(want))
  or (token ~= '' and token_of(v) ~= token)
  or (extend and not claimed(v))
then
  return false
end
local before = earliest()
local now = clock()
local due = now + tonumber(ttl)
local kind = 't'
if extend then
  kind = 'l'
end
if claimed(v) and not extend then
  CLAIMED = -1
end
local revs = nil
if extend then
  revs = {rev_of(v)} -- a lease's renewal keeps the revision: the claim's holder wrote nothing
end
redis.call('ZREM', Z, member(id, v))
file(1, {id}, {int16(due)}, {kind .. int16(ttl) .. attempt .. claim16}, {payload_of(v)}, false, revs)
wake_if_sooner(before, due)
finish()
return due
