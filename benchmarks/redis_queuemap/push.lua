-- PUSH / push_many: ARGV[5] "1" on a retried attempt, then (id, ttl µs, payload) per element.
-- Returns {1, created} when pushed (created: the dehydrator was empty), {0, id} when an id is
-- present, {2} when a retry finds the batch already pushed (an id present with the same payload).
load_state(true)
local retry = ARGV[5] == '1'
local n = (#ARGV - 5) / 3
local seen = 0
for i = 0, n - 1 do
  local id = ARGV[6 + 3 * i]
  if retry then
    local payload = redis.call('HGET', P, id)
    if payload then
      if payload ~= ARGV[8 + 3 * i] then
        return {0, id}
      end
      seen = seen + 1
    end
  elseif redis.call('HEXISTS', M, id) == 1 then
    return {0, id}
  end
end
if seen > 0 then
  return {2}
end
local before = earliest()
local created = before == nil -- no queue: no element
local now = clock()
local items, soonest = {}, nil
for i = 0, n - 1 do
  local ttl = ARGV[7 + 3 * i]
  local due = now + tonumber(ttl)
  if soonest == nil or due < soonest then
    soonest = due
  end
  items[i + 1] = {ARGV[6 + 3 * i], '0', 't' .. ttl, due, ARGV[8 + 3 * i]}
end
file(items)
wake_if_sooner(before, soonest)
finish()
if created then
  if REG then
    redis.call('SADD', REG, NAME)
  end
  return {1, 1}
end
return {1, 0}
