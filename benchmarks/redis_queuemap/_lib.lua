-- rehydrate's Redis store: the shared part, prepended to every script (see _redis.py).
--
-- One dehydrator lives under a base "<prefix>:{<name>}" (the braces are a Cluster hash tag, so all
-- its keys share one slot and every script touches one slot):
--
--   KEYS[1] <base>:m          HASH  id -> seq16 .. due16 .. attempt .. "|" .. queue
--   KEYS[2] <base>:p          HASH  id -> payload (the serialized element)
--   KEYS[3] <base>:h          ZSET  one member per non-empty queue, seq16 .. ":" .. queue, where
--                                   seq16 is its first entry's; scored by that entry's due time.
--                                   Equal scores sort by member, so by seq: filing order.
--   KEYS[4] <base>:s          HASH  seq (last sequence number), now (latest time used), ser (serializer)
--   KEYS[5] <base>:d          HASH  queue -> how many dead entries its list holds
--   KEYS[6] <prefix>:names    SET   names of the non-empty dehydrators (not passed on Redis Cluster)
--   <base>:q:<queue>          LIST  entries due16 .. seq16 .. id in filing order, which is due order
--                                   because a queue holds one TTL ("t<µs>") or one lease ("l<µs>")
--   <base>:wake               pub/sub channel: published when something becomes due sooner
--
-- due16 and seq16 are zero-padded to 16 digits, so entries compare as strings in (due, seq) order
-- and their parts are cut out by position, without pattern matching. An entry is live while the
-- element's seq in <base>:m is the entry's. Every script keeps these invariants: the first and the
-- last entry of every list are live (so there is no all-dead list); <base>:h holds exactly the
-- first entry of every list; <base>:d counts the dead entries in between. Removing an element is
-- O(1): its fields go and its entry dies in place. A list is rewritten with its live entries once
-- it holds more dead entries than live ones (and more than 32).
--
-- Times are integer microseconds (16 digits last until the year 2286; exact in a Lua double).
-- ARGV[1] skew (µs added to the time, for tests), ARGV[2] pinned time (µs, tests) or "",
-- ARGV[3] serializer name, ARGV[4] dehydrator name; each verb's own arguments start at ARGV[5].

local M, P, H, S, D, REG = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
-- Scripts may not create globals: this is where the values they ignore go.
local _
local BASE = M and string.sub(M, 1, -3)
local NAME = ARGV[4]
-- Never unpack more values than this into one command (the Lua stack is small).
local CHUNK = 1000
local COMPACT_MIN = 32
local sub = string.sub

-- Sift heap[k] down a 1-based binary min-heap of tables ordered by their .key (the k-way merges
-- of take.lua and xpoll.lua).
local function heap_down(heap, k)
  local size = #heap
  local r = heap[k]
  while true do
    local c = 2 * k
    if c > size then
      break
    end
    if c < size and heap[c + 1].key < heap[c].key then
      c = c + 1
    end
    if heap[c].key >= r.key then
      break
    end
    heap[k] = heap[c]
    k = c
  end
  heap[k] = r
end

local function int(n)
  return string.format('%d', n)
end

local function int16(n)
  return string.format('%016d', n)
end

local function qkey(queue)
  return BASE .. ':q:' .. queue
end

-- The parts of a meta value: seq16, due16, attempt, queue (strings).
local function parse_meta(v)
  local attempt, queue = string.match(v, '^(%d+)|(.*)$', 33)
  return sub(v, 1, 16), sub(v, 17, 32), attempt, queue
end

local function live(v, seq16)
  return v and sub(v, 1, 16) == seq16
end

local SEQ, LAST_NOW = 0, 0

-- Read seq and the latest time used; fail (before any write) if the elements were serialized
-- differently from what this client uses.
local function load_state(check_serializer)
  local state = redis.call('HMGET', S, 'seq', 'now', 'ser')
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

-- Save seq and time (kept when the dehydrator empties, so seqs are never reused); when it is
-- empty (only scripts that removed elements ask), forget its serializer and its name.
local function finish(removed)
  if removed and redis.call('EXISTS', M) == 0 then
    redis.call('DEL', D)
    redis.call('HSET', S, 'seq', int(SEQ), 'now', int(LAST_NOW))
    redis.call('HDEL', S, 'ser')
    if REG then
      redis.call('SREM', REG, NAME)
    end
    return
  end
  redis.call('HSET', S, 'seq', int(SEQ), 'now', int(LAST_NOW), 'ser', ARGV[3])
end

-- Due time of the first element, or nil.
local function earliest()
  local top = redis.call('ZRANGE', H, 0, 0, 'WITHSCORES')
  if top[2] then
    return tonumber(top[2])
  end
  return nil
end

local function wake_if_sooner(before, due)
  if due and (before == nil or due < before) then
    redis.call('PUBLISH', BASE .. ':wake', int(due))
  end
end

-- Remove fields from a hash, CHUNK at a time.
local function hdel(key, ids, n)
  for i = 1, n, CHUNK do
    redis.call('HDEL', key, unpack(ids, i, math.min(i + CHUNK - 1, n)))
  end
end

-- File elements at the end of their queues. items: {id, attempt, queue, due, payload or nil}, in
-- order; a nil payload leaves the stored one as it is.
local function file(items)
  local metas, nm, payloads, np = {}, 0, {}, 0
  local lists, order = {}, {}
  local last_due, due = nil, nil
  for i = 1, #items do
    local it = items[i]
    SEQ = SEQ + 1
    local seq = int16(SEQ)
    if it[4] ~= last_due then
      last_due, due = it[4], int16(it[4])
    end
    metas[nm + 1] = it[1]
    metas[nm + 2] = seq .. due .. it[2] .. '|' .. it[3]
    nm = nm + 2
    if nm >= CHUNK then
      redis.call('HSET', M, unpack(metas, 1, nm))
      nm = 0
    end
    if it[5] then
      payloads[np + 1] = it[1]
      payloads[np + 2] = it[5]
      np = np + 2
      if np >= CHUNK then
        redis.call('HSET', P, unpack(payloads, 1, np))
        np = 0
      end
    end
    local list = lists[it[3]]
    if not list then
      list = {}
      lists[it[3]] = list
      order[#order + 1] = it[3]
    end
    list[#list + 1] = due .. seq .. it[1]
  end
  if nm > 0 then
    redis.call('HSET', M, unpack(metas, 1, nm))
  end
  if np > 0 then
    redis.call('HSET', P, unpack(payloads, 1, np))
  end
  for _, queue in ipairs(order) do
    local list, q = lists[queue], qkey(queue)
    for i = 1, #list, CHUNK do
      local j = math.min(i + CHUNK - 1, #list)
      local len = redis.call('RPUSH', q, unpack(list, i, j))
      if i == 1 and len == j then
        redis.call('ZADD', H, tonumber(sub(list[1], 1, 16)), sub(list[1], 17, 32) .. ':' .. queue)
      end
    end
  end
end

-- Pop the dead entries at one end of list q; return how many, and the entry now at that end.
local function settle(q, front)
  local popped, n = 0, 1
  while true do
    local chunk
    if front then
      chunk = redis.call('LRANGE', q, 0, n - 1)
    else
      chunk = redis.call('LRANGE', q, -n, -1)
    end
    local count = #chunk
    if count == 0 then
      return popped, nil
    end
    local ids = {}
    for i = 1, count do
      ids[i] = sub(chunk[i], 33)
    end
    local metas = redis.call('HMGET', M, unpack(ids))
    local first, last, step = 1, count, 1
    if not front then
      first, last, step = count, 1, -1
    end
    local dead, found = 0, nil
    for i = first, last, step do
      if live(metas[i], sub(chunk[i], 17, 32)) then
        found = chunk[i]
        break
      end
      dead = dead + 1
    end
    if dead > 0 then
      if front then
        redis.call('LTRIM', q, dead, -1)
      else
        redis.call('LTRIM', q, 0, -dead - 1)
      end
      popped = popped + dead
    end
    if found or count < n then
      return popped, found
    end
    n = math.min(n * 4, CHUNK)
  end
end

-- Rewrite list q with its live entries only. Its first entry is live, so its heads member stays.
local function compact(q)
  local all = redis.call('LRANGE', q, 0, -1)
  local keep = {}
  for i = 1, #all, CHUNK do
    local j = math.min(i + CHUNK - 1, #all)
    local ids = {}
    for k = i, j do
      ids[k - i + 1] = sub(all[k], 33)
    end
    local metas = redis.call('HMGET', M, unpack(ids))
    for k = i, j do
      if live(metas[k - i + 1], sub(all[k], 17, 32)) then
        keep[#keep + 1] = all[k]
      end
    end
  end
  redis.call('DEL', q)
  for i = 1, #keep, CHUNK do
    redis.call('RPUSH', q, unpack(keep, i, math.min(i + CHUNK - 1, #keep)))
  end
end

-- queue -> {entry = true} for the entries killed in it by this script; fix_all repairs the
-- queues once the elements' fields are updated.
local DIRTY = {}

-- Note that the element whose meta is v has been removed or re-filed (its fields already say so).
local function kill(v)
  local queue = sub(v, string.find(v, '|', 33, true) + 1)
  local killed = DIRTY[queue]
  if not killed then
    killed = {n = 0}
    DIRTY[queue] = killed
  end
  killed[sub(v, 17, 32) .. sub(v, 1, 16)] = true -- the entry's due16 .. seq16 (then its id)
  killed.n = killed.n + 1
end

-- Restore the invariants of a queue some of whose entries just died: pop dead entries at its
-- ends, re-seat its first entry in the zset, count the dead ones left inside, compact if need be.
local function fix(queue, killed)
  local q = qkey(queue)
  local first = redis.call('LINDEX', q, 0)
  if not first then
    redis.call('HDEL', D, queue)
    return
  end
  local dead = tonumber(redis.call('HGET', D, queue) or '0') + killed.n
  local head = first
  if killed[sub(first, 1, 32)] then
    local popped
    popped, head = settle(q, true)
    dead = dead - popped
    redis.call('ZREM', H, sub(first, 17, 32) .. ':' .. queue)
    if not head then
      redis.call('HDEL', D, queue)
      return
    end
    redis.call('ZADD', H, tonumber(sub(head, 1, 16)), sub(head, 17, 32) .. ':' .. queue)
  end
  if dead > 0 then
    local last = redis.call('LINDEX', q, -1)
    if killed[sub(last, 1, 32)] then
      dead = dead - settle(q, false)
    end
  end
  if dead > COMPACT_MIN and dead * 2 > redis.call('LLEN', q) then
    compact(q)
    dead = 0
  end
  if dead > 0 then
    redis.call('HSET', D, queue, dead)
  elseif killed.n > 0 then
    redis.call('HDEL', D, queue)
  end
end

local function fix_all()
  for queue, killed in pairs(DIRTY) do
    fix(queue, killed)
  end
  DIRTY = {}
end
