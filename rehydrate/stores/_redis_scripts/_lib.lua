-- rehydrate's Redis store: the shared part, prepended to every script (see _redis.py).
--
-- One dehydrator lives under a base "<prefix>:{<name>}" (the braces are a Cluster hash tag, so all
-- its keys share one slot and every script touches one slot). The order of its elements is the
-- core's queue-map made of small sorted sets that Redis keeps as listpacks, a few bytes per entry:
--
--   KEYS[1] <base>:h          HASH  id -> header .. payload (see enc): the elements
--   KEYS[2] <base>:i          ZSET  the index of the time buckets: member the 6-byte seq of the
--                                   member a bucket starts at, scored by that member's due time
--   KEYS[3] <base>:s          HASH  seq (last sequence number), now (latest time used), ser
--                                   (serializer), fmt (FORMAT), n (elements), claimed (how many
--                                   elements are claimed; absent when none); ser, fmt and n are
--                                   absent when the dehydrator is empty
--   KEYS[4] <prefix>:names    SET   names of the non-empty dehydrators (not passed on Redis Cluster)
--   <base>:b:<seq6>           ZSET  a time bucket: member seq6 .. id per element, scored by its
--                                   due time (µs); equal scores sort by member, so by seq: filing
--                                   order
--   <base>:wake               pub/sub channel: published when something becomes due sooner
--
-- The time buckets partition the elements' (due, seq) order into ranges: a bucket holds the
-- members from its start (its index entry: score and seq) up to the next bucket's start. A
-- member is filed into the bucket with the greatest start at or before it (bucket_of), or, before
-- them all, into the first bucket, renamed to start at it; a bucket that grows past TB_MAX
-- members is cut into buckets of TB_FILL (tb_done), before Redis would turn its listpack into a
-- skip list (it never turns it back); a batch of more than TB_MAX filed before every bucket or
-- after everything in its bucket is written as new buckets of TB_FILL at once (tb_write); an
-- emptied bucket is deleted (its range joins the one before). So poll, claim and TTN read the
-- first bucket, and each element costs one listpack entry, not a skip-list node. The elements' hash is one key, not buckets of its own: a batch
-- reads or writes it in one command, where buckets would cost a command per element
-- (docs/stores-design-history.md has the measurements).
--
-- The header (enc, dec) is binary: a flags byte, seq (6 bytes), due (7, µs), span (7: the TTL the
-- element was filed with, or the lease it is claimed for), then only when not zero (or, for rev,
-- not its seq) attempt (4), claim (6) and rev (6); the payload follows. Flags: LEASE (claimed),
-- ATTEMPT, CLAIM, REV (which of the optional fields are there).
--
-- claim is the seq its last claim drew (0 if never claimed): never reused, so attempt .. claim is
-- the claim's fencing token (a stale claimer's token matches no later claim, nor a new element
-- pushed under the same id, whose attempts start again from 0). A claimed element stays in its
-- bucket order, filed at the end of its lease: once that passes it is due again, like any other
-- element. Every filing (push, claim, reschedule, extend) draws a new seq, so ties come out in
-- filing order. rev is the element's revision (ElementInfo.revision): every write of the element
-- draws a new seq for it (a filing's own seq, an update's a seq of its own) but an extend, which
-- keeps it. The conditional writes (replace_if.lua, update.lua and pull.lua given a revision)
-- compare it with the one given and write in the same script: that is compare-and-set.
--
-- Formats: fmt "3" is this one; "2" (and "1", ser but no fmt) were one HASH <base>:e of id ->
-- decimal header .. payload and one ZSET <base>:z of seq16 .. id. Every script refuses an older
-- format (RHFORMAT, before any write) until migrate.lua has moved its elements, which the client
-- then does and calls again.
--
-- Invariants: each element has one map entry and one member, seq6 .. id with its header's seq,
-- scored by its header's due, in the bucket bucket_of names; n counts them. Nothing else is kept
-- (<base>:s is a few fields a name), so removed elements leave nothing.
--
-- Times are integer microseconds (below 2^53, so exact in a Lua double and in a zset score); they
-- go to Redis as int() strings, never as Lua numbers (which Redis would print with 14 digits).
-- ARGV[1] skew (µs added to the time, for tests), ARGV[2] pinned time (µs, tests) or "", ARGV[3]
-- serializer name, ARGV[4] dehydrator name; each verb's own arguments start at ARGV[5].

local H, I, S, REG = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- Scripts may not create globals: this is where the values they ignore go.
local _
local BASE = H and string.sub(H, 1, -3)
local NAME = ARGV[4]
-- Never unpack more values than this into one command (the Lua stack is small).
local CHUNK = 1000
local sub = string.sub
local byte, find = string.byte, string.find
local pack, unpack_s = struct.pack, struct.unpack
local band = bit.band
-- The elements' format, kept in <base>:s's fmt.
local FORMAT = '3'
-- A time bucket is cut when it holds more than TB_MAX members, into buckets of TB_FILL.
local TB_MAX, TB_FILL = 120, 64

local function int(n)
  return string.format('%d', n)
end

local function int16(n)
  return string.format('%016d', n)
end

-- -- the header ------------------------------------------------------------------------------------

-- The header's fields: claimed, seq, due, span, attempt, claim, rev, and where the payload starts.
local function dec(v)
  local f = byte(v, 1)
  local seq, due, span, at = unpack_s('>I6I7I7', v, 2)
  local attempt, claim, rev = 0, 0, seq
  if band(f, 2) ~= 0 then
    attempt, at = unpack_s('>I4', v, at)
  end
  if band(f, 4) ~= 0 then
    claim, at = unpack_s('>I6', v, at)
  end
  if band(f, 8) ~= 0 then
    rev, at = unpack_s('>I6', v, at)
  end
  return band(f, 1) ~= 0, seq, due, span, attempt, claim, rev, at
end

-- A header (see dec); the payload is appended by the caller. One pack per header, its format
-- chosen by the flags (no table per call: a claim or a push makes one per element).
local ENC_FMT = {}
for f = 0, 15 do
  local fmt = '>BI6I7I7'
  if band(f, 2) ~= 0 then
    fmt = fmt .. 'I4'
  end
  if band(f, 4) ~= 0 then
    fmt = fmt .. 'I6'
  end
  if band(f, 8) ~= 0 then
    fmt = fmt .. 'I6'
  end
  ENC_FMT[f] = fmt
end

local function enc(lease, seq, due, span, attempt, claim, rev)
  local f = 0
  if lease then
    f = 1
  end
  -- The optional fields present, in order, as x, y, z (pack ignores the values past its format).
  local x, y, z = rev, rev, rev
  if rev ~= seq then
    f = f + 8
  end
  if claim ~= 0 then
    f = f + 4
    x, y = claim, rev
  end
  if attempt ~= 0 then
    f = f + 2
    x, y, z = attempt, x, y
  end
  return pack(ENC_FMT[f], f, seq, due, span, x, y, z)
end

local function payload_of(v)
  local _, _, _, _, _, _, _, at = dec(v)
  return sub(v, at)
end

-- The (attempt, claim) of a fencing token as the client sends it: attempt10 .. claim16.
local function token_parts(token)
  return tonumber(sub(token, 1, 10)), tonumber(sub(token, 11))
end

-- The time-bucket member of the element with that seq.
local function tmember(seq, id)
  return pack('>I6', seq) .. id
end

local function mseq(m)
  return (unpack_s('>I6', m))
end

-- -- state -----------------------------------------------------------------------------------------

local SEQ, LAST_NOW, COUNT = 0, 0, 0
-- How many elements this script claimed (+) or released or removed while claimed (-): finish()
-- adds it to <base>:s's "claimed", which rehydrate stats reads instead of scanning the headers.
local CLAIMED = 0

-- On Redis Cluster, a slot being moved (MIGRATE, key by key) may have some of a dehydrator's keys
-- on each node. The time buckets are not in KEYS, so Redis's own checks (TRYAGAIN, ASK), which
-- see only KEYS, miss the split: a script would meet a missing bucket after it had written, and
-- Redis would stop it there, half done. Two keys that never exist make Redis check the slot
-- itself: a command on missing keys is refused on either node while the slot moves (missing
-- keys in a migrating slot are redirected; several keys, some missing, in an importing one too)
-- and answered anywhere else. So no script of a dehydrator runs while its slot moves: each
-- refuses before any write, with RHMOVING, which the client retries like a lost connection
-- (_redis_client.py) until the slot has its new owner.
local function settled()
  local probe = redis.pcall('EXISTS', BASE .. ':probe1', BASE .. ':probe2')
  if type(probe) == 'table' and probe.err then
    error({err = 'RHMOVING the dehydrator ' .. NAME .. ' is moving between cluster nodes (its slot is being migrated)'})
  end
end

-- Read the state; fail (before any write) if the elements are in an older format (migrate.lua,
-- which passes any_format, converts them) or were serialized differently from what this client uses.
local function load_state(check_serializer, any_format)
  if not REG then
    settled()
  end
  local state = redis.call('HMGET', S, 'seq', 'now', 'ser', 'fmt', 'n')
  if state[3] and state[4] ~= FORMAT and not any_format then
    error({err = 'RHFORMAT ' .. (state[4] or '1')})
  end
  if check_serializer and state[3] and state[3] ~= ARGV[3] then
    error({err = 'RHSERIALIZER ' .. state[3]})
  end
  SEQ = tonumber(state[1] or '0')
  LAST_NOW = tonumber(state[2] or '0')
  COUNT = tonumber(state[5] or '0')
end

-- The server's time (or the pinned one), plus the skew; never earlier than a time already used.
local function clock()
  local t
  if ARGV[2] ~= '' then
    t = tonumber(ARGV[2])
  else
    local tt = redis.call('TIME')
    t = tonumber(tt[1]) * 1000000 + tonumber(tt[2])
  end
  t = t + tonumber(ARGV[1])
  if t < LAST_NOW then
    t = LAST_NOW
  end
  LAST_NOW = t
  return t
end

-- The time a batch's ttls count from (push_many, replace_if): ``arg``, the caller's reading of this
-- server's clock in µs taken when its call began (before it encoded and sent the batch), when it
-- is at most START_SLACK before ``now``; ``now`` otherwise (and for ""), so that a drifted reading
-- files late by a round trip, never early.
local START_SLACK = 250000
local function start_of(arg, now)
  if arg ~= '' then
    local start = tonumber(arg)
    if start <= now and now - start <= START_SLACK then
      return start
    end
  end
  return now
end

-- Run a command on values[1..n], CHUNK at a time: cmd key value... Returns nothing.
local function each_chunk(cmd, key, values, n)
  for i = 1, n, CHUNK do
    redis.call(cmd, key, unpack(values, i, math.min(i + CHUNK - 1, n)))
  end
end

-- -- the map ------------------------------------------------------------------------------------

-- HMGET of n ids in the hash ``key`` (H, or migrate.lua's old one), CHUNK at a time: the values
-- in order (false for a missing id).
local function hmget(key, ids, n)
  if n == 0 then
    return {}
  end
  if n <= CHUNK then
    return redis.call('HMGET', key, unpack(ids, 1, n))
  end
  local out = {}
  for i = 1, n, CHUNK do
    local got = redis.call('HMGET', key, unpack(ids, i, math.min(i + CHUNK - 1, n)))
    for k = 1, #got do
      out[i + k - 1] = got[k]
    end
  end
  return out
end

-- -- the time buckets ------------------------------------------------------------------------------

local function tkey(start)
  return BASE .. ':b:' .. start
end

-- Buckets filed into by this script (start -> true), cut in tb_done() when grown too big.
local GROWN = {}

-- The indexes 1..n in (dues[i], seqs[i]) order. A batch is most often in order already, or has
-- few distinct due times (its TTLs) or none shared (due times of their own): indexes are grouped
-- by due time, the due times sorted as numbers, and a group sorted by seq only when it must be.
local function in_order(dues, seqs, n)
  local order, sorted = {}, true
  for i = 1, n do
    order[i] = i
    if i > 1 and (dues[i] < dues[i - 1] or (dues[i] == dues[i - 1] and seqs[i] < seqs[i - 1])) then
      sorted = false
    end
  end
  if sorted then
    return order
  end
  local groups, distinct, nd = {}, {}, 0
  for i = 1, n do
    local d = dues[i]
    local g = groups[d]
    if not g then
      g = {}
      groups[d] = g
      nd = nd + 1
      distinct[nd] = d
    end
    g[#g + 1] = i
  end
  table.sort(distinct)
  local k = 0
  for j = 1, nd do
    local g = groups[distinct[j]]
    for m = 2, #g do
      if seqs[g[m]] < seqs[g[m - 1]] then
        table.sort(g, function(a, b)
          return seqs[a] < seqs[b]
        end)
        break
      end
    end
    for m = 1, #g do
      k = k + 1
      order[k] = g[m]
    end
  end
  return order
end

-- The index entries from the one that (due, seq) belongs in on, WINDOW more at most: {names,
-- dues, seqs, more} (more: the index goes on past them), or nil when (due, seq) is before every
-- bucket's start. One or two commands read the buckets a sorted batch will meet next.
local WINDOW = 16
local function window_of(due, seq)
  local due_s = int(due)
  local r = redis.call('ZRANGE', I, due_s, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, 1, 'WITHSCORES')
  if r[1] == nil then
    return nil
  end
  local got, skip
  if tonumber(r[2]) < due or mseq(r[1]) <= seq then
    -- r is the greatest start at or before due: the next ones are due later.
    got = redis.call('ZRANGE', I, '(' .. due_s, '+inf', 'BYSCORE', 'LIMIT', 0, WINDOW, 'WITHSCORES')
    table.insert(got, 1, r[2])
    table.insert(got, 1, r[1])
  else
    -- Among starts at the same due time: bisection on their seqs (as bucket_of).
    local lo = redis.call('ZCOUNT', I, '-inf', '(' .. due_s)
    local hi = redis.call('ZCOUNT', I, '-inf', due_s) - 1
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if mseq(redis.call('ZRANGE', I, mid, mid)[1]) <= seq then
        lo = mid + 1
      else
        hi = mid
      end
    end
    if lo == 0 then
      return nil
    end
    got = redis.call('ZRANGE', I, lo - 1, lo - 1 + WINDOW, 'WITHSCORES')
  end
  local names, wdues, wseqs = {}, {}, {}
  for k = 1, #got / 2 do
    names[k], wdues[k], wseqs[k] = got[2 * k - 1], tonumber(got[2 * k]), mseq(got[2 * k - 1])
  end
  return {names, wdues, wseqs, #names == WINDOW + 1}
end

-- The index entry (its member: the bucket's start seq, 6 bytes) of the bucket that (due, seq)
-- belongs in, or nil when it is before every bucket's start (or there is none): the greatest
-- start at or before (due, seq); among starts at the same due time (a batch filed at one time and
-- cut), by bisection on their seqs.
local function bucket_of(due, seq)
  local win = window_of(due, seq)
  return win and win[1][1]
end

-- Walk n elements in (due, seq) order, calling each_group(start, members) once per bucket with
-- the members (made by member_of(i)) that belong in it: a window of the index read once per
-- WINDOW buckets met, not a lookup per element. start is nil for the run of elements before every
-- bucket's start (tb_add's case: it files them in front, so the window is read again after).
local function by_bucket(dues, seqs, n, member_of, each_group)
  local win, j, start, group, found = nil, 0, nil, {}, false
  -- In the run before every bucket's start: lead; the first start (lead_due, lead_seq), or no
  -- lead_due when there is no bucket at all.
  local lead, lead_due, lead_seq = false, nil, nil
  for _, i in ipairs(in_order(dues, seqs, n)) do
    local due, seq = dues[i], seqs[i]
    local here, known = nil, false
    if lead then
      known = lead_due == nil or due < lead_due or (due == lead_due and seq < lead_seq)
    elseif win then
      local names, wdues, wseqs = win[1], win[2], win[3]
      local last = #names
      while j < last and (due > wdues[j + 1] or (due == wdues[j + 1] and seq >= wseqs[j + 1])) do
        j = j + 1
      end
      if j < last or not win[4] then
        here, known = names[j], true
      end
    end
    if not known then
      -- Past the window or the run in front: the index is read again (after a run in front is
      -- filed, which changes it).
      if found then
        each_group(start, group)
        group, found = {}, false
      end
      lead = false
      win, j = window_of(due, seq), 1
      here = win and win[1][1]
      if not win then
        lead = true
        local top = redis.call('ZRANGE', I, 0, 0, 'WITHSCORES')
        lead_due, lead_seq = nil, nil
        if top[1] then
          lead_due, lead_seq = tonumber(top[2]), mseq(top[1])
        end
      end
    end
    if not found or here ~= start then
      if found then
        each_group(start, group)
        group = {}
      end
      start, found = here, true
    end
    group[#group + 1] = member_of(i)
  end
  if found then
    each_group(start, group)
  end
end

-- Write a group of members (indexes into scored, in order) in pieces of ``piece``: the first
-- into the bucket ``start``, or, with no start, into a new bucket; every later piece into a new
-- bucket, indexed at its first member. Only a piece filed into a bucket that was there may have
-- grown past TB_MAX (tb_done cuts it); a new one holds at most TB_FILL.
local function tb_write(scored, group, start, piece)
  local count = #group
  for from = 1, count, piece do
    -- Last member first: ZADD into a listpack walks it from its head to the place of each member,
    -- so members given in descending order are each placed at the head at once, where ascending
    -- ones would each walk the whole listpack.
    local args, k = {}, 0
    for g = math.min(from + piece - 1, count), from, -1 do
      local i = group[g]
      args[k + 1], args[k + 2] = scored[2 * i - 1], scored[2 * i]
      k = k + 2
    end
    if from == 1 and start then
      each_chunk('ZADD', tkey(start), args, k)
      GROWN[start] = true
    else
      local i = group[from]
      local name = sub(scored[2 * i], 1, 6)
      redis.call('ZADD', I, scored[2 * i - 1], name)
      each_chunk('ZADD', tkey(name), args, k)
    end
  end
end

-- File members: scored[] is score, member, score, member... (2n values; scores int() strings);
-- dues[i] and seqs[i] are the numbers. Either one member (migrate.lua) or members with seqs just
-- drawn, above every member's: nothing filed at the same due time sorts after them.
local function tb_add(scored, dues, seqs, n)
  by_bucket(dues, seqs, n, function(i)
    return i
  end, function(start, group)
    local count = #group
    if not start then
      -- A big batch before every bucket's start (a claim's, its lease ending before the rest is
      -- due) is new buckets of TB_FILL in front, not grown into the first bucket and cut.
      if count > TB_MAX then
        tb_write(scored, group, nil, TB_FILL)
        return
      end
      -- A few: the first bucket (if any) now starts at them, renamed so.
      local i = group[1]
      start = sub(scored[2 * i], 1, 6)
      local first = redis.call('ZRANGE', I, 0, 0)[1]
      if first then
        redis.call('RENAME', tkey(first), tkey(start))
        redis.call('ZREM', I, first)
        GROWN[first] = nil
      end
      redis.call('ZADD', I, scored[2 * i - 1], start)
    end
    -- A big batch filed after everything in its bucket (a claim's, at the end of its lease) is
    -- written as new buckets of TB_FILL straight away, not grown into a skip list and cut.
    local piece = count
    local first = group[1]
    if count > TB_MAX and redis.call('ZCOUNT', tkey(start), '(' .. scored[2 * first - 1], '+inf') == 0 then
      piece = TB_FILL
    end
    tb_write(scored, group, start, piece)
  end)
end

-- Remove the member of each element (dues[i], seqs[i], ids[i]); drop emptied buckets.
local function tb_rem(dues, seqs, ids, n)
  by_bucket(dues, seqs, n, function(i)
    return tmember(seqs[i], ids[i])
  end, function(start, members)
    local key = tkey(start)
    each_chunk('ZREM', key, members, #members)
    if redis.call('EXISTS', key) == 0 then
      redis.call('ZREM', I, start)
      GROWN[start] = nil
    end
    return start
  end)
end

-- Cut the grown buckets that hold more than TB_MAX members into buckets of TB_FILL, rewritten
-- from scratch (a listpack that grew into a skip list stays one otherwise).
local function tb_done()
  for start in pairs(GROWN) do
    local key = tkey(start)
    if redis.call('ZCARD', key) > TB_MAX then
      local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
      redis.call('DEL', key)
      local scored, group = {}, {}
      for r = 1, #all / 2 do
        scored[2 * r - 1], scored[2 * r], group[r] = all[2 * r], all[2 * r - 1], r
      end
      tb_write(scored, group, start, TB_FILL)
    end
  end
  GROWN = {}
end

-- Members in (due, seq) order, due by ``bound`` (nil: any), from a cursor {rank, offset} (the
-- bucket's rank in the index, the member's rank in it), ``want`` at most: a list of {member,
-- score (string), bucket start} triples as three arrays; the cursor moves past them.
local function tb_page(cursor, bound, want)
  local members, scores, starts, n = {}, {}, {}, 0
  local hi = '+inf'
  if bound then
    hi = int(bound)
  end
  while n < want do
    local start = redis.call('ZRANGE', I, cursor[1], cursor[1])[1]
    if not start then
      break
    end
    local key = tkey(start)
    local got = redis.call('ZRANGE', key, '-inf', hi, 'BYSCORE', 'LIMIT', cursor[2], want - n, 'WITHSCORES')
    local m = #got / 2
    for r = 1, m do
      n = n + 1
      members[n], scores[n], starts[n] = got[2 * r - 1], got[2 * r], start
    end
    cursor[2] = cursor[2] + m
    if n >= want then
      break
    end
    -- Fewer than asked: this bucket is done, or what is left of it is due after bound.
    if redis.call('ZCARD', key) > cursor[2] then
      break
    end
    cursor[1], cursor[2] = cursor[1] + 1, 0
  end
  return members, scores, starts, n
end

-- -- the dehydrator --------------------------------------------------------------------------------

-- Save the state (seq and time are kept when the dehydrator empties, so seqs are never reused);
-- when it is empty (only scripts that removed elements ask), forget its serializer and its name.
-- Grown time buckets are cut here, after the script's last filing.
local function finish(removed)
  tb_done()
  if CLAIMED ~= 0 and redis.call('HINCRBY', S, 'claimed', CLAIMED) == 0 then
    redis.call('HDEL', S, 'claimed')
  end
  if removed and COUNT == 0 then
    redis.call('HSET', S, 'seq', int(SEQ), 'now', int(LAST_NOW))
    redis.call('HDEL', S, 'ser', 'fmt', 'n')
    if REG then
      redis.call('SREM', REG, NAME)
    end
    return
  end
  redis.call('HSET', S, 'seq', int(SEQ), 'now', int(LAST_NOW), 'ser', ARGV[3], 'fmt', FORMAT, 'n', int(COUNT))
end

-- Due time of the first element, or nil.
local function earliest()
  local start = redis.call('ZRANGE', I, 0, 0)[1]
  if not start then
    return nil
  end
  local top = redis.call('ZRANGE', tkey(start), 0, 0, 'WITHSCORES')
  return tonumber(top[2])
end

-- TTN at ``now``: microseconds until the first element is due (0 if one is), -1 if there is none.
local function ttn_at(now)
  local first = earliest()
  if first == nil then
    return -1
  end
  if first <= now then
    return 0
  end
  return first - now
end

local function wake_if_sooner(before, due)
  if due and (before == nil or due < before) then
    redis.call('PUBLISH', BASE .. ':wake', int(due))
  end
end

-- File n elements anew, in order: ids[i] due at dues[i] (numbers), each with a new seq, its
-- header made by head(i, seq) (the payloads[i] after it). The caller has removed an element's old
-- member first; COUNT is the caller's.
local function file(n, ids, dues, head, payloads)
  local scored, seqs, values = {}, {}, {}
  local seq = SEQ
  local last_due, last_text = nil, nil -- (a batch's elements often share a due time)
  for i = 1, n do
    local id, due = ids[i], dues[i]
    seq = seq + 1
    seqs[i] = seq
    values[2 * i - 1], values[2 * i] = id, head(i, seq) .. payloads[i]
    if due ~= last_due then
      last_due, last_text = due, int(due)
    end
    scored[2 * i - 1] = last_text
    scored[2 * i] = tmember(seq, id)
  end
  SEQ = seq
  each_chunk('HSET', H, values, 2 * n)
  tb_add(scored, dues, seqs, n)
end
