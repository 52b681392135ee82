-- REARM: ARGV[5] the time (µs, this store's clock) the ttls count from, or "" for now; then per
-- item, four values: id, ttl (µs), token (attempt10 .. claim16), payload. For each: end the claim
-- and file the element anew with that payload at ARGV[5] + ttl, unclaimed, attempt 0 (a recurring
-- schedule's next occurrence, filed as the current one ends: due at its nominal time, however long
-- the call took to get here), only if the element is claimed under that very token. Returns a 1
-- or a 0 per item.
load_state(true)
local n = (#ARGV - 5) / 4
local before = earliest()
local now = clock()
if ARGV[5] ~= '' then
  now = tonumber(ARGV[5])
end
local out, soonest = {}, nil
for i = 1, n do
  local at = 2 + 4 * i
  local id, ttl, token = ARGV[at], ARGV[at + 1], ARGV[at + 2]
  local v = redis.call('HGET', E, id)
  if v and claimed(v) and token_of(v) == token then
    local due = now + tonumber(ttl)
    CLAIMED = CLAIMED - 1
    redis.call('ZREM', Z, member(id, v))
    file(1, {id}, {int16(due)}, {'t' .. int16(ttl) .. UNCLAIMED}, {ARGV[at + 3]})
    if soonest == nil or due < soonest then
      soonest = due
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
wake_if_sooner(before, soonest)
finish()
return out
