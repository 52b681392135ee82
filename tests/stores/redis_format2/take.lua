-- POLL and claim: ARGV[5] "poll" or "claim", ARGV[6] limit, ARGV[7] lease (µs, claim),
-- ARGV[8] the highest seq to take, or "" for any, ARGV[9] "1" to return the payloads joined by
-- commas in one string (for JSON), else "0", ARGV[10] the latest due time to take (µs), or "" for
-- now, ARGV[11] (claim, optional) µs past that latest due time also taken (Store.claim's ahead),
-- unless claimed with a lease that has not run out by then. A caller that takes page after page
-- passes the seq and the time its first page reported, so nothing filed since comes back (such
-- as its own claims with a lease of 0): everything filed since is due at that time or later, and
-- sorts after what it may take (ahead of time, it is skipped wherever it sorts).
--
-- The due elements are the zset's first members: one ZRANGE BYSCORE finds them, one
-- ZREMRANGEBYRANK removes them (claim adds them back, scored by the end of their lease).
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

local members, ids, values
local n = 0
if early > 0 then
  -- Ahead of time (claim only), the first members up to bound are not all takeable: an element
  -- under a running lease (claimed, its lease not out by base) is left to its worker, and what
  -- was filed since the first page (this claim's own claims with a short lease, due at that
  -- page's time, sort among the others) does not come back. Scan past them, page by page,
  -- until limit are found or none is left; what is taken is removed member by member.
  members, ids, values = {}, {}, {}
  local offset = 0
  while n < limit do
    local want = limit - n
    local chunk = redis.call('ZRANGE', Z, '-inf', bound, 'BYSCORE', 'LIMIT', offset, want)
    local m = #chunk
    if m == 0 then
      break
    end
    local chunk_ids = {}
    for i = 1, m do
      chunk_ids[i] = sub(chunk[i], 17)
    end
    local chunk_values = hmget(E, chunk_ids, m)
    for i = 1, m do
      local v = chunk_values[i]
      local since = max_seq and tonumber(sub(chunk[i], 1, 16)) > max_seq
      if not since and not held(v, base) then
        n = n + 1
        members[n], ids[n], values[n] = chunk[i], chunk_ids[i], v
      end
    end
    offset = offset + m
    if m < want then
      break
    end
  end
else
  members = redis.call('ZRANGE', Z, '-inf', bound, 'BYSCORE', 'LIMIT', 0, limit)
  n = #members
  -- Members filed since the first page are due at its time or later, so they are the last ones
  -- here (due at that very time, after every older member due then): cut them off the end.
  while max_seq and n > 0 and tonumber(sub(members[n], 1, 16)) > max_seq do
    n = n - 1
  end
  ids = {}
  for i = 1, n do
    ids[i] = sub(members[i], 17)
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

if early == 0 then
  values = hmget(E, ids, n)
end
local payloads = {}
for i = 1, n do
  payloads[i] = payload_of(values[i])
end
local joined = ''
if join then
  joined = table.concat(payloads, ',', 1, n)
end
if early > 0 then
  each_chunk('ZREM', Z, members, n)
else
  redis.call('ZREMRANGEBYRANK', Z, 0, n - 1)
end

if claim then
  local until_ = now + tonumber(ARGV[7])
  local how = 'l' .. int16(tonumber(ARGV[7]))
  local until16 = int16(until_)
  local due16s, tails, by_attempt = {}, {}, {}
  local out = {top_seq, full, now, until_, joined, ''}
  local k = 6
  for i = 1, n do
    local v = values[i]
    if not claimed(v) then
      CLAIMED = CLAIMED + 1
    end
    local attempt = tonumber(sub(v, 50, 59)) + 1
    local tail = by_attempt[attempt] -- most elements of a batch share their attempt
    if not tail then
      tail = how .. string.format('%010d', attempt)
      by_attempt[attempt] = tail
    end
    -- file() below gives the i-th element seq SEQ + i, and writes it as its claim16: its claim
    -- number.
    tails[i] = tail
    due16s[i] = until16
    out[k + 1] = ids[i]
    out[k + 2] = attempt
    out[k + 3] = sub(v, 17, 32)
    out[k + 4] = SEQ + i
    if join then
      out[k + 5] = ''
    else
      out[k + 5] = payloads[i]
    end
    k = k + 5
  end
  file(n, ids, due16s, tails, payloads, true)
  finish()
  out[6] = left()
  return out
end
each_chunk('HDEL', E, ids, n)
for i = 1, n do
  if claimed(values[i]) then
    CLAIMED = CLAIMED - 1
  end
end
finish(true)
if join then
  return {top_seq, full, now, joined}
end
local out = {top_seq, full, now}
for i = 1, n do
  out[3 + i] = payloads[i]
end
return out
