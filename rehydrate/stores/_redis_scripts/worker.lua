-- worker: write the worker registry, one HASH (KEYS[1] = <prefix>:workers) from worker id to
-- last_seen16 .. expires16 .. data (JSON text), times in µs of the server's clock (see clock()).
-- ARGV[5] the operation, ARGV[6] the worker id:
--   'beat' ARGV[7] ttl (µs), ARGV[8] keep (µs), ARGV[9] data: the upsert of a heartbeat, which also
--          forgets the other workers whose heartbeat expired keep µs ago or more (O(workers));
--   'drop': remove the worker; 1 if it was there, else 0.
local W, id = KEYS[1], ARGV[6]
if ARGV[5] == 'drop' then
  return redis.call('HDEL', W, id)
end
local now = clock()
local keep = tonumber(ARGV[8])
local all = redis.call('HGETALL', W)
local gone, n = {}, 0
for i = 1, #all, 2 do
  if all[i] ~= id and tonumber(sub(all[i + 1], 17, 32)) + keep <= now then
    n = n + 1
    gone[n] = all[i]
  end
end
if n > 0 then
  each_chunk('HDEL', W, gone, n)
end
redis.call('HSET', W, id, int16(now) .. int16(now + tonumber(ARGV[7])) .. ARGV[9])
return 1
