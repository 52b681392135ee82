-- XPOLL, one page: ARGV[5] page size, ARGV[6] the last entry's due16 .. seq16 from the previous
-- page or "", ARGV[7] the time of the first page or "", ARGV[8] how many ids earlier pages gave.
-- Returns {now, last due16 .. seq16, id...}: due ids in due order, none removed.
--
-- A k-way merge as in take.lua, without removing anything. A queue whose first entry is at or
-- before the cursor gave that entry on an earlier page, so there are at most ARGV[8] such queues,
-- and they come first in the heads zset; after them only the next `page size` queues can give
-- anything. Queues past the cursor are read only once they reach the top of the heap.
load_state(false)
local now
if ARGV[7] ~= '' then
  now = tonumber(ARGV[7])
else
  now = clock()
end
local limit = tonumber(ARGV[5])
local after = ARGV[6]
if after == '' then
  after = nil
end
local seen = tonumber(ARGV[8] or '0')
local due_bound = int16(now) .. ':'

-- The first index of list q whose entry sorts after the cursor.
local function start(q)
  local lo, hi = 0, redis.call('LLEN', q)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if sub(redis.call('LINDEX', q, mid), 1, 32) <= after then
      lo = mid + 1
    else
      hi = mid
    end
  end
  return lo
end

-- Load a reader's next live due entries into r.buf; false when it has none left.
local function refill(r)
  while not r.done do
    local n = r.n
    local chunk = redis.call('LRANGE', r.q, r.pos, r.pos + n - 1)
    r.pos = r.pos + #chunk
    if #chunk < n then
      r.done = true
    end
    r.n = math.min(n * 4, CHUNK)
    local ids, m = {}, 0
    for i = 1, #chunk do
      if chunk[i] >= due_bound then
        r.done = true
        break
      end
      m = i
      ids[i] = sub(chunk[i], 33)
    end
    if m > 0 then
      local metas = redis.call('HMGET', M, unpack(ids, 1, m))
      local buf = {}
      for i = 1, m do
        if live(metas[i], sub(chunk[i], 17, 32)) then
          buf[#buf + 1] = chunk[i]
        end
      end
      if #buf > 0 then
        r.buf, r.i, r.key = buf, 1, buf[1]
        return true
      end
    end
  end
  return false
end

local heap = {}
local function down(k)
  heap_down(heap, k)
end

local heads = redis.call('ZRANGE', H, 0, seen + limit - 1, 'WITHSCORES')
for i = 1, #heads, 2 do
  local due = tonumber(heads[i + 1])
  if due > now then
    break
  end
  local key = int16(due) .. sub(heads[i], 1, 16)
  local r = {q = qkey(sub(heads[i], 18)), n = 8, done = false, pos = 0}
  if after and key <= after then
    r.pos = start(r.q)
    if refill(r) then
      heap[#heap + 1] = r
    end
  else
    r.key, r.lazy = key, true -- its first entry: live and due, as the zset says
    heap[#heap + 1] = r
  end
end
for k = math.floor(#heap / 2), 1, -1 do
  down(k)
end

local out = {now, ''}
while #out - 2 < limit and #heap > 0 do
  local r = heap[1]
  if r.lazy then
    r.lazy = false
    if not refill(r) then
      r.key = nil
    end
  end
  if r.key then
    local e = r.buf[r.i]
    out[#out + 1] = sub(e, 33)
    out[2] = sub(e, 1, 32)
    r.i = r.i + 1
    if r.i <= #r.buf then
      r.key = r.buf[r.i]
    elseif not refill(r) then
      r.key = nil
    end
  end
  if r.key then
    down(1)
  else
    heap[1] = heap[#heap]
    heap[#heap] = nil
    if #heap > 0 then
      down(1)
    end
  end
end
return out
