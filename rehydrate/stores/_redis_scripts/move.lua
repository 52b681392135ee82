-- reschedule and extend: ARGV[5] "reschedule" or "extend", ARGV[6] id, ARGV[7] ttl or lease (µs),
-- ARGV[8] attempt or "". File the element anew at now + ttl (reschedule: released, attempt kept;
-- extend: only a claimed element whose attempt matches, still claimed). Returns the new due time,
-- or nil when nothing was done.
load_state(true)
local extend = ARGV[5] == 'extend'
local id, ttl, want = ARGV[6], ARGV[7], ARGV[8]
local v = redis.call('HGET', E, id)
if not v then
  return false
end
local _, _, _, attempt = parse(v)
if (want ~= '' and tonumber(attempt) ~= tonumber(want)) or (extend and not claimed(v)) then
  return false
end
local before = earliest()
local now = clock()
local due = now + tonumber(ttl)
local kind = 't'
if extend then
  kind = 'l'
end
redis.call('ZREM', Z, member(id, v))
file(1, {id}, {int16(due)}, {kind .. int16(ttl) .. attempt}, {payload_of(v)})
wake_if_sooner(before, due)
finish()
return due
