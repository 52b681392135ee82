-- The server's time in microseconds (without skew), to set a client clock by.
local t = redis.call('TIME')
return tonumber(t[1]) * 1000000 + tonumber(t[2])
