-- reschedule and extend: ARGV[5] "reschedule" or "extend", ARGV[6] id, ARGV[7] ttl or lease (µs),
-- ARGV[8] attempt or "". File the element anew at now + ttl (reschedule: released, attempt kept;
-- extend: only a claimed element whose attempt matches, still claimed). Returns the new due time,
-- or nil when nothing was done.
load_state(true)
local extend = ARGV[5] == 'extend'
local id, ttl, want = ARGV[6], ARGV[7], ARGV[8]
local v = redis.call('HGET', M, id)
if not v then
  return false
end
local _, _, attempt, queue = parse_meta(v)
if (want ~= '' and attempt ~= want) or (extend and sub(queue, 1, 1) ~= 'l') then
  return false
end
local before = earliest()
local now = clock()
local due = now + tonumber(ttl)
local kind = 't'
if extend then
  kind = 'l'
end
file({{id, attempt, kind .. ttl, due, nil}})
kill(v)
fix_all()
wake_if_sooner(before, due)
finish()
return due
