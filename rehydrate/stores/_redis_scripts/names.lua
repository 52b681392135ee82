-- names: KEYS[1] is the registry set. ARGV[1] a name to add to it first, or "".
if ARGV[1] ~= '' then
  redis.call('SADD', KEYS[1], ARGV[1])
end
return redis.call('SMEMBERS', KEYS[1])
