-- Members of the lease index whose deadline has passed, by the server's clock.
--
-- KEYS[1] lease index zset   ARGV[1] limit

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now),
  'LIMIT', 0, ARGV[1])
