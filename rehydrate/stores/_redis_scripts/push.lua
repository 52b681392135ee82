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
local found = hmget(H, ids, n)
local seen = 0
local before = earliest()
local old_dues, old_seqs, old_ids, k = {}, {}, {}, 0
for i = 1, n do
  local v = found[i]
  if v and replace then
    -- The new element takes the old one's place: its member goes, its value is overwritten.
    local lease, seq, due = dec(v)
    k = k + 1
    old_dues[k], old_seqs[k], old_ids[k] = due, seq, ids[i]
    if lease then
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
if k > 0 then
  tb_rem(old_dues, old_seqs, old_ids, k)
end
COUNT = COUNT + n - k
local now = start_of(ARGV[6], clock())
local dues, spans, soonest = {}, {}, nil
for i = 1, n do
  local ttl = tonumber(ARGV[5 + 3 * i])
  local due = now + ttl
  if soonest == nil or due < soonest then
    soonest = due
  end
  dues[i], spans[i] = due, ttl
end
file(n, ids, dues, function(i, seq)
  return enc(false, seq, dues[i], spans[i], 0, 0, seq)
end, payloads)
wake_if_sooner(before, soonest)
finish()
if before == nil then -- no element before: the dehydrator was created
  if REG then
    redis.call('SADD', REG, NAME)
  end
  return {1, 1}
end
return {1, 0}
