-- Record a lease deadline in the lease index, by the server's clock (the
-- same clock that expires the lease key, so replicas' clock skew is moot).
--
-- KEYS[1] lease index zset   ARGV[1] member "tenant/id"   ARGV[2] lease TTL, ms

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], string.format('%d', now + tonumber(ARGV[2])), ARGV[1])
return 1
