-- Counts a session as running for its tenant: a zset member whose score is
-- the deadline by which its replica must refresh it. Members past their
-- deadline (a dead replica's) no longer count.
-- KEYS[1] the tenant's slot zset
-- ARGV[1] session id, ARGV[2] max running (0 = refresh without a check),
-- ARGV[3] ttl in ms
-- Returns 1 when counted, 0 when the tenant is at its maximum.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local max = tonumber(ARGV[2])
if max > 0 and not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= max then
  return 0
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return 1
