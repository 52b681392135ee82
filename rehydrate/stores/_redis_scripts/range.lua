-- XPOLL and ids, one page: ARGV[5] page size, ARGV[6] the latest due time to list (µs), "" for
-- now (xpoll's first page) or "+inf" (ids), ARGV[7] and ARGV[8] the score and the seq of the last
-- member of the previous page, or "" on the first page.
-- Returns {bound (0 for ids), score, seq, id...}: ids in due order, none removed; score and seq
-- are the last listed member's (or ARGV[7] and ARGV[8] when none is), for the next page.
--
-- A page starts after the previous page's last member, whether or not that member is still there:
-- its rank is found by bisection among the members that share its score.
load_state(false)
local bound
if ARGV[6] == '' then
  bound = clock()
elseif ARGV[6] == '+inf' then
  bound = nil
else
  bound = tonumber(ARGV[6])
end
local limit = tonumber(ARGV[5])
local start = 0
local last_score, last_seq = ARGV[7], ARGV[8]
if last_score ~= '' then
  local seq = tonumber(last_seq)
  local lo = redis.call('ZCOUNT', Z, '-inf', '(' .. last_score)
  local hi = redis.call('ZCOUNT', Z, '-inf', last_score)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local m = redis.call('ZRANGE', Z, mid, mid)[1]
    if tonumber(sub(m, 1, 16)) <= seq then
      lo = mid + 1
    else
      hi = mid
    end
  end
  start = lo
end
local page = redis.call('ZRANGE', Z, start, start + limit - 1, 'WITHSCORES')
local out = {bound or 0, last_score, last_seq}
for i = 1, #page, 2 do
  if bound and tonumber(page[i + 1]) > bound then
    break
  end
  local m = page[i]
  out[#out + 1] = sub(m, 17)
  out[2] = page[i + 1]
  out[3] = sub(m, 1, 16)
end
return out
