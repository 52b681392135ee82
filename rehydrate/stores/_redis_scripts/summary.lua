-- summary (rehydrate stats): {size, due now, claimed, µs until the first is due or -1 if empty}.
-- The due count reads the buckets due by now, one ZCOUNT each.
load_state(false)
local now = clock()
local left = ttn_at(now)
local claimed_count = tonumber(redis.call('HGET', S, 'claimed') or '0')
local due, rank = 0, 0
local now_s = int(now)
while true do
  local start = redis.call('ZRANGE', I, rank, rank, 'WITHSCORES')
  if not start[1] or (rank > 0 and tonumber(start[2]) > now) then
    break
  end
  due = due + redis.call('ZCOUNT', tkey(start[1]), '-inf', now_s)
  rank = rank + 1
end
return {COUNT, due, claimed_count, left}
