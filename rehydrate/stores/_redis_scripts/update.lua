-- UPDATE and update_if: ARGV[5] id, ARGV[6] new payload, ARGV[7] the claim's token, or "" for no
-- fence; ARGV[8] (update_if) the revision the element must still have (rev16), or "".
-- Returns {1, old payload, new revision}, or {0} if the id is unknown (or, fenced, no longer
-- under that claim; or, with a revision, written since). The comparison and the write are in
-- this one script: update_if's compare-and-set.
load_state(true)
local id = ARGV[5]
local v = redis.call('HGET', H, id)
if not v then
  return {0}
end
local lease, seq, due, span, attempt, claim, rev, at = dec(v)
if ARGV[7] ~= '' then
  local a, c = token_parts(ARGV[7])
  if not (lease and a == attempt and c == claim) then
    return {0}
  end
end
if (ARGV[8] or '') ~= '' and rev ~= tonumber(ARGV[8]) then
  return {0}
end
local old = sub(v, at)
-- A write of the element: a new revision, a seq of its own (nothing is filed: the member stays).
SEQ = SEQ + 1
redis.call('HSET', H, id, enc(lease, seq, due, span, attempt, claim, SEQ) .. ARGV[6])
finish()
return {1, old, SEQ}
