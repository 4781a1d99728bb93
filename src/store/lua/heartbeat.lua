-- An instance is alive until the deadline its last beat set, by the
-- server's clock (replicas' clock skew does not matter).
--
-- KEYS[1] replicas zset   ARGV[1] instance   ARGV[2] TTL, ms
-- Returns 1, or 0 when the previous beat had lapsed (or there was none).
-- A beat lapses at its deadline, as replicas_dead.lua and the memory
-- store count it: a beat that another replica could have seen dead at
-- this very millisecond is reported lapsed.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local before = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '0')
redis.call('ZADD', KEYS[1], string.format('%d', now + tonumber(ARGV[2])), ARGV[1])
if before <= now then return 0 end
return 1
