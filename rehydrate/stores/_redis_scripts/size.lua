-- size: how many elements the dehydrator holds.
return tonumber(redis.call('HGET', S, 'n') or '0')
