-- XACK and ack. ARGV[5] "xack" or "ack".
-- xack: ARGV[6] attempt or "", ARGV[7] token (attempt10 .. claim16) or "", then ids; removes
-- each element that is due or claimed (and whose attempt or token matches, if given) and returns
-- its payload, nil in its place otherwise.
-- ack: (id, token) pairs from ARGV[6]; removes each claimed element still under that token and
-- returns 1 for it, 0 otherwise.
load_state(true)
local xack = ARGV[5] == 'xack'
local now, attempt, token, first, step = 0, nil, nil, 6, 2
if xack then
  now = clock()
  if ARGV[6] ~= '' then
    attempt = tonumber(ARGV[6])
  end
  if ARGV[7] ~= '' then
    token = ARGV[7]
  end
  first, step = 8, 1
end
local ids, tokens, count = {}, {}, 0
for i = first, #ARGV, step do
  count = count + 1
  ids[count] = ARGV[i]
  if xack then
    tokens[count] = token
  else
    tokens[count] = ARGV[i + 1]
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
    local want = tokens[i]
    ok = (want == nil or token_of(v) == want)
      and (attempt == nil or tonumber(sub(v, 50, 59)) == attempt)
      and (claimed(v) or (xack and tonumber(sub(v, 17, 32)) <= now))
    if ok then
      n = n + 1
      if claimed(v) then
        CLAIMED = CLAIMED - 1
      end
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
