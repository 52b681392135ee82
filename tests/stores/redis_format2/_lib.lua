-- rehydrate's Redis store: the shared part, prepended to every script (see _redis.py).
--
-- One dehydrator lives under a base "<prefix>:{<name>}" (the braces are a Cluster hash tag, so all
-- its keys share one slot and every script touches one slot):
--
--   KEYS[1] <base>:e          HASH  id -> a 91-character header, then the payload (the element
--                                   serialized); the header is seq16 .. due16 .. how17 .. attempt10
--                                   .. claim16 .. rev16
--   KEYS[2] <base>:z          ZSET  one member per element, seq16 .. id, scored by its due time.
--                                   Equal scores sort by member, so by seq: filing order.
--   KEYS[3] <base>:s          HASH  seq (last sequence number), now (latest time used), ser (serializer),
--                                   claimed (how many elements are claimed; absent when none),
--                                   fmt (the elements' format, FORMAT; with ser: absent when none),
--                                   mig (migrate.lua's progress, only while it converts them)
--   KEYS[4] <prefix>:names    SET   names of the non-empty dehydrators (not passed on Redis Cluster)
--   <base>:wake               pub/sub channel: published when something becomes due sooner
--
-- seq16, due16, attempt10 and claim16 are zero-padded decimals; how17 is "t" and the TTL the
-- element was filed with, or "l" and the lease it is claimed for, in 16 digits (µs). claim16 is
-- the seq its last claim drew (0 if never claimed): never reused, so attempt10 .. claim16 is the
-- claim's fencing token (a stale claimer's token matches no later claim, nor a new element pushed
-- under the same id, whose attempts start again from 0). A claimed element stays
-- in the zset, scored by the end of its lease: once that passes it is due again, like any other
-- element. Every filing (push, claim, reschedule, extend) draws a new seq, so ties come out in
-- filing order. The element's member is found from its id through the header's seq16.
--
-- rev16 is the element's revision (ElementInfo.revision): every write of the element draws a new
-- seq for it (a filing's own seq, an update's a seq of its own) but an extend, which keeps it. Seqs
-- are never reused, so neither are revisions, even under a reused id. The conditional writes
-- (replace_if.lua, update.lua and pull.lua given a revision) compare it with the one given and
-- write in the same script: that is what makes them compare-and-set.
--
-- Formats: a dehydrator written by a version whose header ended at claim16 (75 characters) has
-- ser but no fmt in <base>:s; every script refuses it (RHFORMAT, before any write) until
-- migrate.lua has converted its elements, which the client then does and calls again.
--
-- Invariants: the ids of <base>:e and of the zset's members are the same set, and each element
-- has one member, seq16 .. id with its header's seq16, scored by its header's due16. Nothing else
-- of the dehydrator is kept (<base>:s is a few fields a name), so removed elements leave nothing.
--
-- Times are integer microseconds (16 digits last until the year 2286; below 2^53, so exact in a
-- Lua double and in a zset score). ARGV[1] skew (µs added to the time, for tests), ARGV[2] pinned
-- time (µs, tests) or "", ARGV[3] serializer name, ARGV[4] dehydrator name; each verb's own
-- arguments start at ARGV[5].

local E, Z, S, REG = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- Scripts may not create globals: this is where the values they ignore go.
local _
local BASE = E and string.sub(E, 1, -3)
local NAME = ARGV[4]
-- Never unpack more values than this into one command (the Lua stack is small).
local CHUNK = 1000
local sub = string.sub
local byte, find = string.byte, string.find
-- The header's length; the payload starts after it.
local HEADER = 91
-- The elements' format, kept in <base>:s's fmt: "2" since the header has rev16.
local FORMAT = '2'
-- attempt10 .. claim16 of an element never claimed.
local UNCLAIMED = '00000000000000000000000000'

local function int(n)
  return string.format('%d', n)
end

local function int16(n)
  return string.format('%016d', n)
end

-- The parts of an element's value (strings): seq16, due16, how17, attempt10, claim16, rev16.
local function parse(v)
  return sub(v, 1, 16), sub(v, 17, 32), sub(v, 33, 49), sub(v, 50, 59), sub(v, 60, 75), sub(v, 76, 91)
end

-- The element's revision, rev16 (compared as a string: the client sends 16 digits).
local function rev_of(v)
  return sub(v, 76, 91)
end

-- The fencing token of the element's last claim: attempt10 .. claim16.
local function token_of(v)
  return sub(v, 50, 75)
end

local function payload_of(v)
  return sub(v, HEADER + 1)
end

-- Whether the element whose value is v is claimed (filed for a lease, not a TTL).
local function claimed(v)
  return sub(v, 33, 33) == 'l'
end

-- Whether a worker holds the element whose value is v at ``now``: claimed, its lease running.
local function held(v, now)
  return claimed(v) and tonumber(sub(v, 17, 32)) > now
end

-- The zset member of the element whose value is v.
local function member(id, v)
  return sub(v, 1, 16) .. id
end

local SEQ, LAST_NOW = 0, 0
-- How many elements this script claimed (+) or released or removed while claimed (-): finish()
-- adds it to <base>:s's "claimed", which rehydrate stats reads instead of scanning the headers.
local CLAIMED = 0

-- Read seq and the latest time used; fail (before any write) if the elements are in an older
-- format (migrate.lua converts them) or were serialized differently from what this client uses.
local function load_state(check_serializer)
  local state = redis.call('HMGET', S, 'seq', 'now', 'ser', 'fmt')
  if state[3] and state[4] ~= FORMAT then
    error({err = 'RHFORMAT ' .. (state[4] or '1')})
  end
  if check_serializer and state[3] and state[3] ~= ARGV[3] then
    error({err = 'RHSERIALIZER ' .. state[3]})
  end
  SEQ = tonumber(state[1] or '0')
  LAST_NOW = tonumber(state[2] or '0')
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

-- Save seq and time (kept when the dehydrator empties, so seqs are never reused); when it is
-- empty (only scripts that removed elements ask), forget its serializer and its name.
local function finish(removed)
  if CLAIMED ~= 0 and redis.call('HINCRBY', S, 'claimed', CLAIMED) == 0 then
    redis.call('HDEL', S, 'claimed')
  end
  if removed and redis.call('EXISTS', E) == 0 then
    redis.call('HSET', S, 'seq', int(SEQ), 'now', int(LAST_NOW))
    redis.call('HDEL', S, 'ser', 'fmt')
    if REG then
      redis.call('SREM', REG, NAME)
    end
    return
  end
  redis.call('HSET', S, 'seq', int(SEQ), 'now', int(LAST_NOW), 'ser', ARGV[3], 'fmt', FORMAT)
end

-- Due time of the first element, or nil.
local function earliest()
  local top = redis.call('ZRANGE', Z, 0, 0, 'WITHSCORES')
  if top[2] then
    return tonumber(top[2])
  end
  return nil
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

-- Run a command on values[1..n], CHUNK at a time: cmd key value... Returns nothing.
local function each_chunk(cmd, key, values, n)
  for i = 1, n, CHUNK do
    redis.call(cmd, key, unpack(values, i, math.min(i + CHUNK - 1, n)))
  end
end

-- HMGET of n ids, CHUNK at a time: the values in order (false for a missing field).
local function hmget(key, ids, n)
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

-- File n elements anew, in order: ids[i], due at due16s[i] (a string), with the header's
-- how17 .. attempt10 .. claim16 tails[i] and payloads[i] after the header. Each draws a seq; its
-- value is written and its member added. With claimed, tails[i] stops at attempt10 and the seq
-- the element draws is its claim16 (formatted once for both). The seq drawn is the element's
-- new revision too (rev16), unless revs gives the one it keeps (an extend). The caller has
-- removed an element's old member first.
local function file(n, ids, due16s, tails, payloads, claimed, revs)
  local values, scored = {}, {}
  local seq = SEQ
  for i = 1, n do
    local id, due16 = ids[i], due16s[i]
    seq = seq + 1
    local seq16 = int16(seq)
    values[2 * i - 1] = id
    if claimed then
      values[2 * i] = seq16 .. due16 .. tails[i] .. seq16 .. seq16 .. payloads[i]
    elseif revs then
      values[2 * i] = seq16 .. due16 .. tails[i] .. revs[i] .. payloads[i]
    else
      values[2 * i] = seq16 .. due16 .. tails[i] .. seq16 .. payloads[i]
    end
    scored[2 * i - 1] = due16 -- a string: Redis parses it, Lua need not format a number
    scored[2 * i] = seq16 .. id
  end
  SEQ = seq
  each_chunk('HSET', E, values, 2 * n)
  each_chunk('ZADD', Z, scored, 2 * n)
end
