-- POLL and claim: ARGV[5] "poll" or "claim", ARGV[6] limit, ARGV[7] lease (µs, claim),
-- ARGV[8] the highest seq to take, or "" for any, ARGV[9] "1" to return the payloads joined by
-- commas in one string (for JSON), else "0", ARGV[10] the latest due time to take (µs), or "" for
-- now, ARGV[11] (claim, optional) µs past that latest due time also taken (Store.claim's ahead),
-- unless claimed with a lease that has not run out by then. A caller that takes page after page
-- passes the seq and the time its first page reported, so nothing filed since comes back (such
-- as its own claims with a lease of 0): everything filed since is due at that time or later, and
-- sorts after what it may take (ahead of time, it is skipped wherever it sorts).
--
-- The due elements are the first buckets' first members: read in order (tb_page), removed whole
-- bucket by whole bucket and ZREMRANGEBYRANK in the last one (claim files them again, at the end
-- of their lease).
--
-- poll returns {seq, full, now, payload...} (or {seq, full, now, joined}); claim returns
-- {seq, full, now, lease_until, joined or "", left, then id, attempt, due, claim, payload or ""
-- per element}; claim is the seq the element's claim draws (its fencing token's claim number).
-- seq is the dehydrator's seq before the call, full is 1 when limit elements were taken. left is
-- what TTN would answer once the claim is done (µs; 0 if an element is due, -1 if none), or ""
-- when full: a claim loop that took fewer than it asked for sleeps that long next, and so needs
-- no TTN call of its own (see StoreBase.ttn_after_claim).
load_state(true)
local claim = ARGV[5] == 'claim'
local limit = tonumber(ARGV[6])
local max_seq = tonumber(ARGV[8])
local join = ARGV[9] == '1'
local top_seq = SEQ
local now = clock()
local base = tonumber(ARGV[10]) or now
local early = tonumber(ARGV[11]) or 0
local bound = base + early

local ids, values, seqs, dues, due_texts = {}, {}, {}, {}, {}
local n = 0
local cursor = {0, 0}
if early > 0 then
  -- Ahead of time (claim only), the first members up to bound are not all takeable: an element
  -- under a running lease (claimed, its lease not out by base) is left to its worker, and what
  -- was filed since the first page (this claim's own claims with a short lease, due at that
  -- page's time, sort among the others) does not come back. Scan past them, page by page,
  -- until limit are found or none is left; what is taken is removed member by member.
  while n < limit do
    local want = limit - n
    local members, scores, _, m = tb_page(cursor, bound, want)
    if m == 0 then
      break
    end
    for i = 1, m do
      local id = sub(members[i], 7)
      local seq = mseq(members[i])
      local v = redis.call('HGET', H, id)
      local lease, _, due = dec(v)
      local since = max_seq and seq > max_seq
      if not since and not (lease and due > base) then
        n = n + 1
        ids[n], values[n], seqs[n], dues[n] = id, v, seq, tonumber(scores[i])
        due_texts[n] = scores[i]
      end
    end
    if m < want then
      break
    end
  end
else
  local members, scores, starts, m = tb_page(cursor, bound, limit)
  n = m
  -- Members filed since the first page are due at its time or later, so they are the last ones
  -- here (due at that very time, after every older member due then): cut them off the end.
  while max_seq and n > 0 and mseq(members[n]) > max_seq do
    n = n - 1
  end
  for i = 1, n do
    ids[i] = sub(members[i], 7)
  end
  dues = scores -- (strings here: only the reply reads them)
  values = hmget(H, ids, n)
  -- The first n members in order: whole buckets, then a prefix of the last one.
  local i = 1
  while i <= n do
    local start = starts[i]
    local j = i
    while j < n and starts[j + 1] == start do
      j = j + 1
    end
    local key = tkey(start)
    if redis.call('ZCARD', key) == j - i + 1 then
      redis.call('DEL', key)
      redis.call('ZREM', I, start)
    else
      redis.call('ZREMRANGEBYRANK', key, 0, j - i)
    end
    i = j + 1
  end
end
local full = 0
if n == limit then
  full = 1
end

-- take.lua's left (see above), read once the claimed elements are filed again.
local function left()
  if full == 1 then
    return ''
  end
  return ttn_at(now)
end

if n == 0 then
  if claim then
    return {top_seq, full, now, now + tonumber(ARGV[7]), '', left()}
  elseif join then
    return {top_seq, full, now, ''}
  end
  return {top_seq, full, now}
end

if early > 0 then
  tb_rem(dues, seqs, ids, n)
  dues = due_texts
end
local payloads, leased, attempts = {}, {}, {}
for i = 1, n do
  local lease, _, _, _, attempt, _, _, at = dec(values[i])
  payloads[i], leased[i], attempts[i] = sub(values[i], at), lease, attempt
end
local joined = ''
if join then
  joined = table.concat(payloads, ',', 1, n)
end

if claim then
  local lease_us = tonumber(ARGV[7])
  local until_ = now + lease_us
  local out = {top_seq, full, now, until_, joined, ''}
  local k = 6
  local new_dues = {}
  for i = 1, n do
    if not leased[i] then
      CLAIMED = CLAIMED + 1
    end
    local attempt = attempts[i] + 1
    attempts[i] = attempt
    new_dues[i] = until_
    out[k + 1] = ids[i]
    out[k + 2] = attempt
    out[k + 3] = dues[i]
    out[k + 4] = SEQ + i -- file() below gives the i-th element seq SEQ + i: its claim number
    if join then
      out[k + 5] = ''
    else
      out[k + 5] = payloads[i]
    end
    k = k + 5
  end
  file(n, ids, new_dues, function(i, seq)
    -- The claim's seq is its claim number and the element's new revision.
    return enc(true, seq, until_, lease_us, attempts[i], seq, seq)
  end, payloads)
  finish()
  out[6] = left()
  return out
end
each_chunk('HDEL', H, ids, n)
for i = 1, n do
  if leased[i] then
    CLAIMED = CLAIMED - 1
  end
end
COUNT = COUNT - n
finish(true)
if join then
  return {top_seq, full, now, joined}
end
local out = {top_seq, full, now}
for i = 1, n do
  out[3 + i] = payloads[i]
end
return out
