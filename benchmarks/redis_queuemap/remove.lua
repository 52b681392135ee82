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
local metas = redis.call('HMGET', M, unpack(ids))
local gone, n = {}, 0
local removed = {}
for i = 1, count do
  local v = metas[i]
  local ok = false
  if v and not removed[ids[i]] then
    local a, queue = string.match(v, '^(%d+)|(.*)$', 33)
    local want = wants[i]
    ok = (want == nil or a == want)
      and (sub(queue, 1, 1) == 'l' or (xack and tonumber(sub(v, 17, 32)) <= now))
    if ok then
      n = n + 1
      gone[n] = ids[i]
      removed[ids[i]] = true
      kill(v)
    end
  end
  if xack then
    out[i] = ok
  else
    out[i] = ok and 1 or 0
  end
end
if xack and n > 0 then
  local payloads = redis.call('HMGET', P, unpack(gone, 1, n))
  local k = 0
  for i = 1, count do
    if out[i] then
      k = k + 1
      out[i] = payloads[k]
    end
  end
end
hdel(M, gone, n)
hdel(P, gone, n)
fix_all()
finish(true)
return out
