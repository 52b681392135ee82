-- REPLACE_IF: ARGV[5] the time (µs, this store's clock) the ttls count from (see start_of), or ""
-- for now; then per item four values: id, revision (rev16), ttl (µs), payload. For each whose
-- element still has that revision: file the payload in its place anew, unclaimed, attempt 0,
-- due at start + ttl, a new revision (claimed or not: with a claim's revision, this ends that
-- claim and files what comes next, and nobody can claim the id in between). Returns per item the
-- new revision, or -1 (nothing done) when the id is unknown or its revision is another. The client
-- gives each id once. Each comparison and its write are in this one script: compare-and-set.
load_state(true)
local n = (#ARGV - 5) / 4
local out = {}
if n == 0 then
  return out
end
local ids = {}
for i = 1, n do
  ids[i] = ARGV[2 + 4 * i]
end
local values = hmget(H, ids, n)
local before = earliest()
local now = start_of(ARGV[5], clock())
local old_dues, old_seqs, kept, dues, spans, payloads, k = {}, {}, {}, {}, {}, {}, 0
local soonest = nil
for i = 1, n do
  local at = 2 + 4 * i
  local v = values[i]
  if v then
    local lease, seq, due, _, _, _, rev = dec(v)
    if rev == tonumber(ARGV[at + 1]) then
      local ttl = tonumber(ARGV[at + 2])
      local new_due = now + ttl
      if lease then
        CLAIMED = CLAIMED - 1
      end
      k = k + 1
      old_dues[k], old_seqs[k] = due, seq
      kept[k], dues[k], spans[k], payloads[k] = ids[i], new_due, ttl, ARGV[at + 3]
      if soonest == nil or new_due < soonest then
        soonest = new_due
      end
      out[i] = SEQ + k -- file() below draws the k-th kept element seq SEQ + k: its revision
    else
      out[i] = -1
    end
  else
    out[i] = -1
  end
end
if k == 0 then
  return out
end
tb_rem(old_dues, old_seqs, kept, k)
file(k, kept, dues, function(i, seq)
  return enc(false, seq, dues[i], spans[i], 0, 0, seq)
end, payloads)
wake_if_sooner(before, soonest)
finish()
return out
