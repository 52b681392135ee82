-- PUSH / push_many: ARGV[5] "0", "1" on a retried attempt, or "r" to replace elements present;
-- ARGV[6] the time (µs, this store's clock) the ttls count from, or "" for now; then (id, ttl
-- µs, payload) per element. Returns {1, created} when pushed (created: the dehydrator was
-- empty), {0, id} when an id is present, {2} when a retry finds the batch already pushed (an id
-- present with the same payload).
-- The start: a batch is stamped when its script runs, after the client has encoded and sent it
-- (milliseconds for a thousand elements): counted from the call (start_of), each element is due
-- when its caller said.
load_state(true)
local retry = ARGV[5] == '1'
local replace = ARGV[5] == 'r'
local n = (#ARGV - 6) / 3
local ids, payloads = {}, {}
for i = 1, n do
  ids[i] = ARGV[4 + 3 * i]
  payloads[i] = ARGV[6 + 3 * i]
end
local found = hmget(E, ids, n)
local seen = 0
local before = earliest()
for i = 1, n do
  local v = found[i]
  if v and replace then
    -- The new element takes the old one's place: its member goes, its value is overwritten.
    redis.call('ZREM', Z, member(ids[i], v))
    if claimed(v) then
      CLAIMED = CLAIMED - 1
    end
  elseif v then
    -- A retry compares payloads: the first attempt may have pushed the batch before its reply
    -- was lost.
    if not retry or payload_of(v) ~= payloads[i] then
      return {0, ids[i]}
    end
    seen = seen + 1
  end
end
if seen > 0 then
  return {2}
end
local now = start_of(ARGV[6], clock())
local due16s, tails, soonest = {}, {}, nil
-- Elements of a batch often share a TTL: each TTL's due time and header tail are made once.
local by_ttl = {}
for i = 1, n do
  local ttl = ARGV[5 + 3 * i]
  local made = by_ttl[ttl]
  if not made then
    local due = now + tonumber(ttl)
    if soonest == nil or due < soonest then
      soonest = due
    end
    made = {int16(due), 't' .. int16(ttl) .. UNCLAIMED}
    by_ttl[ttl] = made
  end
  due16s[i], tails[i] = made[1], made[2]
end
file(n, ids, due16s, tails, payloads)
wake_if_sooner(before, soonest)
finish()
if before == nil then -- no element before: the dehydrator was created
  if REG then
    redis.call('SADD', REG, NAME)
  end
  return {1, 1}
end
return {1, 0}
