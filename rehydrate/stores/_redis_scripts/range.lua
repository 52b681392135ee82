-- XPOLL and ids, one page: ARGV[5] page size, ARGV[6] the latest due time to list (µs), "" for
-- now (xpoll's first page) or "+inf" (ids), ARGV[7] and ARGV[8] the score and the seq of the last
-- member of the previous page, or "" on the first page.
-- Returns {bound (0 for ids), score, seq, id...}: ids in due order, none removed; score and seq
-- are the last listed member's (or ARGV[7] and ARGV[8] when none is), for the next page.
--
-- A page starts after the previous page's last member, whether or not that member is still there:
-- the bucket it belongs in is found as a filing would find it, and its place in that bucket by
-- bisection among the members that share its score.
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
local cursor = {0, 0}
local last_score, last_seq = ARGV[7], ARGV[8]
if last_score ~= '' then
  local score, seq = tonumber(last_score), tonumber(last_seq)
  local start = bucket_of(score, seq)
  if start then
    local key = tkey(start)
    local lo = redis.call('ZCOUNT', key, '-inf', '(' .. last_score)
    local hi = redis.call('ZCOUNT', key, '-inf', last_score)
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      local m = redis.call('ZRANGE', key, mid, mid)[1]
      if mseq(m) <= seq then
        lo = mid + 1
      else
        hi = mid
      end
    end
    cursor = {redis.call('ZRANK', I, start), lo}
  end
end
local members, scores, _, m = tb_page(cursor, bound, limit)
local out = {bound or 0, last_score, last_seq}
for i = 1, m do
  out[#out + 1] = sub(members[i], 7)
  out[2] = scores[i]
  out[3] = int(mseq(members[i]))
end
return out
