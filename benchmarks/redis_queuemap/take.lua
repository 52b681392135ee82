-- POLL and claim: ARGV[5] "poll" or "claim", ARGV[6] limit, ARGV[7] lease (µs, claim),
-- ARGV[8] the highest seq to take, or "" for any (a caller that takes page after page passes the
-- seq its first page reported, so nothing filed since, such as its own claims, comes back),
-- ARGV[9] "1" to return the payloads joined by commas in one string (for JSON), else "0".
--
-- A k-way merge: the first `limit` members of the heads zset are the only queues the first
-- `limit` due elements can come from. Their first entries (known from the zset, without reading
-- the lists) seed a binary heap in Lua; a queue's list is read, in growing chunks, only once it
-- reaches the top. At the end each queue taken from is trimmed once and re-seated in the zset.
--
-- poll returns {seq, full, payload...} (or {seq, full, joined}); claim returns
-- {seq, full, now, lease_until, joined or "", then id, attempt, due, payload or "" per element}.
-- seq is the dehydrator's seq before the call, full is 1 when limit elements were taken.
load_state(true)
local claim = ARGV[5] == 'claim'
local limit = tonumber(ARGV[6])
local max_seq = nil
if ARGV[8] ~= '' then
  max_seq = int16(tonumber(ARGV[8]))
end
local join = ARGV[9] == '1'
local top_seq = SEQ
local now = clock()
-- ':' sorts after every digit: an entry sorts before this bound exactly when it is due.
local due_bound = int16(now) .. ':'

-- Dead entries per queue (only queues that have some are in <base>:d).
local deads = {}
local flat = redis.call('HGETALL', D)
for i = 1, #flat, 2 do
  deads[flat[i]] = tonumber(flat[i + 1])
end

-- One reader per queue: its current entry is r.key (an entry, or due16 .. seq16 before the list is
-- read); r.buf[r.i] is that entry once read, r.used counts the entries passed (taken or dead).
local heap = {}
local heads = redis.call('ZRANGE', H, 0, limit - 1, 'WITHSCORES')
for i = 1, #heads, 2 do
  local due = tonumber(heads[i + 1])
  if due > now then
    break
  end
  local member = heads[i]
  local seq = sub(member, 1, 16)
  if not (max_seq and seq > max_seq) then
    local queue = sub(member, 18)
    heap[#heap + 1] = {
      key = int16(due) .. seq, member = member, queue = queue, q = qkey(queue),
      dead = deads[queue] or 0, used = 0, skipped = 0, pos = 0, n = 16, buf = nil, i = 0, metas = nil,
    }
  end
end

local function down(k)
  heap_down(heap, k)
end

for k = math.floor(#heap / 2), 1, -1 do
  down(k)
end

local taken, attempts, dues, ntaken = {}, {}, {}, 0
local touched = {}
local left = limit

-- Take r's entries while they sort before bound (the runner-up's key). Returns true when r has
-- more to give in this call (r.key is then its next entry), false when it is done (not due, filed
-- after the first page, empty, or left is 0). r.buf[r.i] is always r's first entry not passed.
local function run(r, bound)
  while left > 0 do
    if not r.buf or r.i > r.len then
      local chunk = redis.call('LRANGE', r.q, r.pos, r.pos + r.n - 1)
      if #chunk == 0 then
        r.buf = nil
        return false
      end
      r.pos = r.pos + #chunk
      r.n = math.min(r.n * 4, CHUNK, left + 16)
      r.buf, r.len, r.i, r.metas = chunk, #chunk, 1, nil
      if claim or r.dead > 0 then
        local ids = {}
        for k = 1, #chunk do
          ids[k] = sub(chunk[k], 33)
        end
        r.metas = redis.call('HMGET', M, unpack(ids))
      end
    end
    local buf, metas, len = r.buf, r.metas, r.len
    local i = r.i
    while i <= len and left > 0 do
      local e = buf[i]
      if e >= bound then
        r.i = i
        if e >= due_bound then
          return false
        end
        r.key = e
        return true
      end
      if max_seq and sub(e, 17, 32) > max_seq then
        r.i = i
        return false
      end
      if metas and not live(metas[i], sub(e, 17, 32)) then
        r.skipped = r.skipped + 1
      else
        ntaken = ntaken + 1
        taken[ntaken] = sub(e, 33)
        if claim then
          attempts[ntaken] = tonumber(string.match(metas[i], '^(%d+)', 33)) + 1
          dues[ntaken] = tonumber(sub(e, 1, 16))
        end
        left = left - 1
      end
      r.used = r.used + 1
      i = i + 1
    end
    r.i = i
  end
  return false
end

local function pop()
  heap[1] = heap[#heap]
  heap[#heap] = nil
  if #heap > 0 then
    down(1)
  end
end

while left > 0 and #heap > 0 do
  local r = heap[1]
  if not r.read then
    r.read = true
    touched[#touched + 1] = r
  end
  local bound = due_bound
  local size = #heap
  if size > 1 then
    bound = heap[2].key
    if size > 2 and heap[3].key < bound then
      bound = heap[3].key
    end
  end
  if run(r, bound) then
    down(1)
  else
    pop()
  end
end

-- Trim every queue taken from, and seat its new first entry in the zset.
for _, r in ipairs(touched) do
  redis.call('LTRIM', r.q, r.used, -1)
  redis.call('ZREM', H, r.member)
  local dead = r.dead - r.skipped
  local head
  if dead > 0 then
    local popped
    popped, head = settle(r.q, true)
    dead = dead - popped
  elseif r.buf and r.i <= #r.buf then
    head = r.buf[r.i] -- the first entry not passed; live, since no dead entry is left
  else
    head = redis.call('LINDEX', r.q, 0)
  end
  if head then
    redis.call('ZADD', H, tonumber(sub(head, 1, 16)), sub(head, 17, 32) .. ':' .. r.queue)
  end
  if dead ~= r.dead then
    if head and dead > 0 then
      redis.call('HSET', D, r.queue, dead)
    else
      redis.call('HDEL', D, r.queue)
    end
  end
end

local payloads = {}
for i = 1, ntaken, CHUNK do
  local got = redis.call('HMGET', P, unpack(taken, i, math.min(i + CHUNK - 1, ntaken)))
  for k = 1, #got do
    payloads[i + k - 1] = got[k]
  end
end
local full = 0
if left == 0 then
  full = 1
end
local joined = ''
if join then
  joined = table.concat(payloads, ',')
end

if claim then
  local until_ = now + tonumber(ARGV[7])
  local queue = 'l' .. ARGV[7]
  local items = {}
  local out = {top_seq, full, now, until_, joined}
  for i = 1, ntaken do
    items[i] = {taken[i], attempts[i], queue, until_, nil}
    out[#out + 1] = taken[i]
    out[#out + 1] = attempts[i]
    out[#out + 1] = dues[i]
    if join then
      out[#out + 1] = ''
    else
      out[#out + 1] = payloads[i]
    end
  end
  file(items)
  finish()
  return out
end
hdel(M, taken, ntaken)
hdel(P, taken, ntaken)
finish(true)
if join then
  return {top_seq, full, joined}
end
table.insert(payloads, 1, full)
table.insert(payloads, 1, top_seq)
return payloads
