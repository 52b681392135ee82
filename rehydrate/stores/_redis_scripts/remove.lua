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
local values = hmget(H, ids, count)
local dues, seqs, gone, n = {}, {}, {}, 0
local removed = {}
for i = 1, count do
  local v = values[i]
  local ok = false
  local at
  if v and not removed[ids[i]] then
    local lease, seq, due, _, got_attempt, claim
    lease, seq, due, _, got_attempt, claim, _, at = dec(v)
    local want = tokens[i]
    if want then
      local a, c = token_parts(want)
      ok = a == got_attempt and c == claim
    else
      ok = true
    end
    ok = ok and (attempt == nil or got_attempt == attempt) and (lease or (xack and due <= now))
    if ok then
      n = n + 1
      if lease then
        CLAIMED = CLAIMED - 1
      end
      gone[n], dues[n], seqs[n] = i, due, seq
      removed[ids[i]] = true
    end
  end
  if xack then
    out[i] = ok and sub(v, at)
  else
    out[i] = ok and 1 or 0
  end
end
if n == 0 then
  return out
end
local gone_ids = {}
for k = 1, n do
  local i = gone[k]
  gone_ids[k] = ids[i]
end
each_chunk('HDEL', H, gone_ids, n)
tb_rem(dues, seqs, gone_ids, n)
COUNT = COUNT - n
finish(true)
return out
