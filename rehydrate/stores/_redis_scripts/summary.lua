-- summary (rehydrate stats): {size, due now, claimed, µs until the first is due or -1 if empty}.
load_state(false)
local now = clock()
local left = ttn_at(now)
local claimed_count = tonumber(redis.call('HGET', S, 'claimed') or '0')
return {redis.call('HLEN', E), redis.call('ZCOUNT', Z, '-inf', now), claimed_count, left}
