-- UPDATE and update_if: ARGV[5] id, ARGV[6] new payload, ARGV[7] the claim's token, or "" for no
-- fence; ARGV[8] (update_if) the revision the element must still have (rev16), or "".
-- Returns {1, old payload, new revision}, or {0} if the id is unknown (or, fenced, no longer
-- under that claim; or, with a revision, written since). The comparison and the write are in
-- this one script: update_if's compare-and-set.
load_state(true)
local id = ARGV[5]
local v = redis.call('HGET', E, id)
if
  not v
  or (ARGV[7] ~= '' and not (claimed(v) and token_of(v) == ARGV[7]))
  or ((ARGV[8] or '') ~= '' and rev_of(v) ~= ARGV[8])
then
  return {0}
end
local old = payload_of(v)
local payload = ARGV[6]
-- A write of the element: a new revision, a seq of its own (nothing is filed: the member stays).
SEQ = SEQ + 1
redis.call('HSET', E, id, sub(v, 1, HEADER - 16) .. int16(SEQ) .. payload)
finish()
return {1, old, SEQ}
