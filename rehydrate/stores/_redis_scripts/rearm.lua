-- REARM: ARGV[5] id, ARGV[6] ttl (µs), ARGV[7] token (attempt10 .. claim16), ARGV[8] payload.
-- End the claim and file the element anew with this payload at now + ttl, unclaimed, attempt 0
-- (a recurring schedule's next occurrence, filed as the current one ends). Only if the element is
-- claimed under that very token. Returns the new due time, or nil when nothing was done.
load_state(true)
local id, ttl, token = ARGV[5], ARGV[6], ARGV[7]
local v = redis.call('HGET', E, id)
if not v or not claimed(v) or token_of(v) ~= token then
  return false
end
local before = earliest()
local due = clock() + tonumber(ttl)
CLAIMED = -1
redis.call('ZREM', Z, member(id, v))
file(1, {id}, {int16(due)}, {'t' .. int16(ttl) .. UNCLAIMED}, {ARGV[8]})
wake_if_sooner(before, due)
finish()
return due
