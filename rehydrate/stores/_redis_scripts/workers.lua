-- workers: read the worker registry (KEYS[1], see worker.lua). ARGV[5] keep (µs). Returns the
-- time now (µs), then id, value pairs of the workers whose heartbeat expired less than keep ago.
local W = KEYS[1]
local now = clock()
local keep = tonumber(ARGV[5])
local all = redis.call('HGETALL', W)
local out, n = {int(now)}, 1
for i = 1, #all, 2 do
  if tonumber(sub(all[i + 1], 17, 32)) + keep > now then
    out[n + 1] = all[i]
    out[n + 2] = all[i + 1]
    n = n + 2
  end
end
return out
