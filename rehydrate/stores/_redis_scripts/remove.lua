-- XACK and ack. ARGV[5] "xack" or "ack".
-- xack: ARGV[6] attempt or "", then ids; removes each element that is due or claimed (and whose
-- attempt matches, if given) and returns its payload, nil in its place otherwise.
-- ack: (id, attempt) pairs from ARGV[6]; removes each claimed element whose attempt matches and
-- returns 1 for it, 0 otherwise.
load_state(true)
local xack = ARGV[5] == 'xack'
local now, attempt, first, step = 0, nil, 6, 2
if xack then
  now = clock()
  attempt = ARGV[6]
  if attempt == '' then
    attempt = nil
  end
  first, step = 7, 1
end
local ids, wants, count = {}, {}, 0
for i = first, #ARGV, step do
  count = count + 1
  ids[count] = ARGV[i]
  if xack then
    wants[count] = attempt
  else
    wants[count] = ARGV[i + 1]
  end
end
local out = {}
if count == 0 then
  return out
end
local values = hmget(E, ids, count)
local gone, members, n = {}, {}, 0
local removed = {}
for i = 1, count do
  local v = values[i]
  local ok = false
  if v and not removed[ids[i]] then
    local want = wants[i]
    ok = (want == nil or tonumber(sub(v, 50, 59)) == tonumber(want))
      and (claimed(v) or (xack and tonumber(sub(v, 17, 32)) <= now))
    if ok then
      n = n + 1
      gone[n] = ids[i]
      members[n] = member(ids[i], v)
      removed[ids[i]] = true
    end
  end
  if xack then
    out[i] = ok and payload_of(v)
  else
    out[i] = ok and 1 or 0
  end
end
if n == 0 then
  return out
end
each_chunk('ZREM', Z, members, n)
each_chunk('HDEL', E, gone, n)
finish(true)
return out
