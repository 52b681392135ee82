-- size: how many elements the dehydrator holds.
return redis.call('HLEN', E)
