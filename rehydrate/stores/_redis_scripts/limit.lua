-- limit: one step of one limit key (Store.limit_acquire, limit_park, limit_renew, limit_release,
-- and the listing's per-key read), the rules of rehydrate/_core/_limits.py written again in Lua,
-- step for step (KeyState.acquire, park, renew, release, prune, room, wake_count, wake): the contract suite's
-- LimitsContract runs the same tests on this as on the memory and SQL stores.
--
-- A limit key (a limit's name and a partition key) lives under one base
-- "<prefix>:limit:{<limit>:<key>}" (both escaped: no '%', '{', '}' or ':' in them), a Cluster hash
-- tag of its own, so its four keys share one slot and every step touches that slot alone:
--
--   KEYS[1] <base>:h   ZSET  holder -> the end of its lease (µs): the concurrency slots held
--   KEYS[2] <base>:t   ZSET  a seq per start -> the time it was granted (µs): the rate windows
--   KEYS[3] <base>:q   ZSET  waiter -> its place in the FIFO (a seq); a waiter is
--                            "<#name>:<name><id>" (the length of its dehydrator's name first)
--   KEYS[4] <base>:m   HASH  seq (the last seq drawn), now (the latest time used), win and hor
--                            (the window and horizon of the last step, for the listing), and per
--                            waiter its "<attempt>:<time>" (time: when its element is filed due)
--
-- Empty sorted sets vanish on their own; a step that leaves no holder, no start and no waiter
-- deletes <base>:m too, so an idle key costs nothing. Every step that writes sets a TTL on the
-- keys (PEXPIRE: twice the horizon and a minute), a safety net for a key that goes idle with no
-- step after it (its last lease runs out, its window slides): all it holds then matters for a
-- horizon at most (a waiter is remembered a horizon past its time, its time at most a horizon
-- out), and the next step or the TTL deletes it.
--
-- Waking: a step answers the waiters it moved earlier (name, id, attempt, ttl) and the client
-- files their elements (RedisStore.reschedule, fenced by the attempt: rehydrate/_limits.py's
-- apply_wakes), a second step. Not in this script because a waiter's dehydrator is in another
-- slot (its own hash tag; a Limiter's waiters each have a dehydrator of their own), so on a
-- Cluster it is on another node in general. The second step is safe if lost (a crash between
-- the two, a failed reschedule): admission is decided here alone, so a lost wake never admits
-- anyone; and every waiter's element is filed due at its own time already (the head at the
-- earliest chance, the others a horizon out), so a lost wake delays a waiter, at most until the
-- next step of its key wakes the next ones (a waiter woken and not come counts as on its way for
-- ON_ITS_WAY only) or its own time comes. The reschedule publishes on the dehydrator's channel
-- when it makes an element due sooner (move.lua), which wakes its claim loops, as any push does.
--
-- Times are µs of the server's clock (clock(): TIME, plus the tests' skew or pin), never earlier
-- than the latest this key used. ARGV[5] the operation; ARGV[6] the holder; ARGV[7] the
-- concurrency or "" (none); ARGV[8] the lease, ARGV[9] the window, ARGV[10] the horizon (µs);
-- ARGV[11], ARGV[12], ARGV[13] the waiter's dehydrator name, id and attempt ("": no waiter);
-- ARGV[14] the number of rates, then each rate's n and window (µs); for 'park', then each
-- waiter's dehydrator name, id and attempt (ARGV[11..13] unused).
--
--   'acquire' -> {granted, retry_in, parked_in, then name, id, attempt, ttl per waiter woken}
--                (retry_in, parked_in: µs, or -1 for none)
--   'park'    -> {0, retry_in, -1, then each given waiter's time to be due (µs) in order, then
--                the other waiters woken as above}
--   'release' -> {held, -1, -1, then the waiters woken as above}
--   'renew'   -> 1 if the holder's lease was running (now renewed), else 0
--   'list'    -> {} for an idle key (deleted), else {starts, waiting, holder, lease end, ...}
local H, T, Q, M = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local op = ARGV[5]
-- rehydrate._core._limits's WAKE_MAX, HEAD_ROWS and ON_ITS_WAY (µs).
local WAKE_MAX, HEAD_ROWS, ON_ITS_WAY = 16, 80, 1000000
-- Past the horizon (twice: a waiter's time, then its memory), the safety net's margin (µs).
local KEEP = 60000000

LAST_NOW = tonumber(redis.call('HGET', M, 'now') or '0')
local now = clock()

-- The waiter's "<attempt>:<time>" as two numbers.
local function parse_waiter(v)
  local colon = find(v, ':', 1, true)
  return tonumber(sub(v, 1, colon - 1)), tonumber(sub(v, colon + 1))
end

if op == 'list' then
  local window = tonumber(redis.call('HGET', M, 'win') or '0')
  redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', T, '-inf', now - window)
  if redis.call('EXISTS', H, T, Q) == 0 then
    redis.call('DEL', M)
    return {}
  end
  local out = {redis.call('ZCARD', T), redis.call('ZCARD', Q)}
  local holders = redis.call('ZRANGE', H, 0, -1, 'WITHSCORES')
  for i = 1, #holders do
    out[i + 2] = holders[i]
  end
  return out
end

local holder = ARGV[6]
local conc = tonumber(ARGV[7]) -- nil: no concurrency
local lease, window, horizon = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local ttl_ms = math.floor((2 * horizon + KEEP) / 1000) + 1

-- A safety net on every key that exists: see the header.
local function keep(keys)
  for _, key in ipairs(keys) do
    redis.call('PEXPIRE', key, ttl_ms)
  end
end

if op == 'renew' then
  local due = redis.call('ZSCORE', H, holder)
  if not due or tonumber(due) <= now then
    return 0
  end
  redis.call('ZADD', H, int(now + lease), holder)
  redis.call('HSET', M, 'now', int(now))
  keep({H, M})
  return 1
end

local rates = {}
for i = 1, tonumber(ARGV[14]) do
  rates[i] = {tonumber(ARGV[13 + 2 * i]), tonumber(ARGV[14 + 2 * i])}
end

-- KeyState.prune: forget the leases that ran out and the starts that left every window.
redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
redis.call('ZREMRANGEBYSCORE', T, '-inf', now - window)

-- _limits.room: how many more starts the key admits now, and, when none, the earliest time one
-- may be (the first lease to end, every full window sliding, whichever is last).
local function room()
  local free, at = math.huge, now
  if conc then
    free = conc - redis.call('ZCARD', H)
    if free <= 0 then
      local first = redis.call('ZRANGE', H, 0, 0, 'WITHSCORES')
      at = math.max(at, tonumber(first[2]))
    end
  end
  if #rates > 0 then
    local total = redis.call('ZCARD', T)
    for _, rate in ipairs(rates) do
      local n, per = rate[1], rate[2]
      local inside = redis.call('ZCOUNT', T, '(' .. int(now - per), '+inf')
      if inside >= n then
        free = math.min(free, 0)
        -- The window admits one more once all but n - 1 of its starts have left it.
        local start = redis.call('ZRANGE', T, total - n, total - n, 'WITHSCORES')
        at = math.max(at, tonumber(start[2]) + per)
      else
        free = math.min(free, n - inside)
      end
    end
  end
  return math.max(free, 0), at
end

local function drop_waiter(w)
  redis.call('ZREM', Q, w)
  redis.call('HDEL', M, w)
end

-- KeyState._wake (wake_count, then _limits.wake over the head of the FIFO): move up to the room
-- there is (at most WAKE_MAX) of the waiters at the head to now, or with no room the head alone to
-- the earliest chance; forget the waiters more than a horizon past their time. Returns the moved
-- ones as {waiter, attempt, due}.
local function wake()
  local free, at = room()
  local count
  if free >= 1 then
    at, count = now, math.min(free, WAKE_MAX)
  else
    count = 1
  end
  local moved = {}
  local rows = redis.call('ZRANGE', Q, 0, count + HEAD_ROWS - WAKE_MAX - 1)
  if #rows == 0 then
    return moved
  end
  local values = redis.call('HMGET', M, unpack(rows))
  local with_room = at <= now
  for i, w in ipairs(rows) do
    local attempt, due
    if values[i] then
      attempt, due = parse_waiter(values[i])
    end
    if not due or due + horizon <= now then
      drop_waiter(w)
    else
      local counts = true
      if due > at then
        redis.call('HSET', M, w, int(attempt) .. ':' .. int(at))
        moved[#moved + 1] = {w, attempt, at}
      elseif with_room and due + ON_ITS_WAY < now then
        counts = false -- woken a while ago and not come: not on its way any more
      end
      if counts then
        count = count - 1
        if count == 0 then
          break
        end
      end
    end
  end
  return moved
end

-- Save the key's time and what the listing needs, or delete it if idle (see the header).
local function finish()
  if redis.call('EXISTS', H, T, Q) == 0 then
    redis.call('DEL', M)
    return
  end
  redis.call('HSET', M, 'now', int(now), 'win', int(window), 'hor', int(horizon))
  keep({H, T, Q, M})
end

-- The reply: the first fields, then the waiters moved but those in `own` (a set: the caller's,
-- which it files itself).
local function answer(head, moved, own)
  finish()
  local out, n = head, #head
  for _, m in ipairs(moved) do
    local w = m[1]
    if not (own and own[w]) then
      local colon = find(w, ':', 1, true)
      local len = tonumber(sub(w, 1, colon - 1))
      out[n + 1] = sub(w, colon + 1, colon + len)
      out[n + 2] = sub(w, colon + len + 1)
      out[n + 3] = int(m[2])
      out[n + 4] = int(math.max(0, m[3] - now))
      n = n + 4
    end
  end
  return out
end

-- A waiter's member in Q (and field in M): its dehydrator's name's length first.
local function waiter_of(name, id)
  return int(#name) .. ':' .. name .. id
end

-- Join the FIFO (or keep one's place in it), filed a horizon out.
local function enqueue(w, attempt)
  if not redis.call('ZSCORE', Q, w) then
    redis.call('ZADD', Q, redis.call('HINCRBY', M, 'seq', 1), w)
  end
  redis.call('HSET', M, w, attempt .. ':' .. int(now + horizon))
end

if op == 'release' then
  local held = redis.call('ZREM', H, holder)
  return answer({held, -1, -1}, wake(), nil)
end

-- 'park' (KeyState.park): queue the waiters in the order given, never grant, wake as any step.
if op == 'park' then
  local mine, own = {}, {}
  for i = 15 + 2 * #rates, #ARGV, 3 do
    local w = waiter_of(ARGV[i], ARGV[i + 1])
    enqueue(w, ARGV[i + 2])
    mine[#mine + 1] = w
    own[w] = true
  end
  local free, at = room()
  local moved = wake()
  local out = {0, free >= 1 and 0 or math.max(0, at - now), -1}
  for _, w in ipairs(mine) do
    local _, due = parse_waiter(redis.call('HGET', M, w))
    out[#out + 1] = int(math.max(0, due - now))
  end
  return answer(out, moved, own)
end

-- 'acquire' (KeyState.acquire)
if conc and redis.call('ZSCORE', H, holder) then -- (a retry of a grant: one slot, no new start)
  redis.call('ZADD', H, int(now + lease), holder)
  return answer({1, -1, -1}, wake(), nil)
end
local own = nil
if ARGV[11] ~= '' then
  own = waiter_of(ARGV[11], ARGV[12])
end
local free, at = room()
if free >= 1 then
  if conc then
    redis.call('ZADD', H, int(now + lease), holder)
  end
  if #rates > 0 then
    redis.call('ZADD', T, int(now), redis.call('HINCRBY', M, 'seq', 1))
  end
  if own then
    drop_waiter(own)
  end
  return answer({1, -1, -1}, wake(), nil)
end
if not own then
  return answer({0, math.max(0, at - now), -1}, wake(), nil)
end
enqueue(own, ARGV[13])
local moved = wake()
local _, due = parse_waiter(redis.call('HGET', M, own))
return answer({0, math.max(0, at - now), math.max(0, due - now)}, moved, {[own] = true})
