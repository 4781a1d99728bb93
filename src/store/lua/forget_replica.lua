-- Forgets an instance whose beat lapsed (its sessions were all taken over);
-- an instance that beat again meanwhile stays.
--
-- KEYS[1] replicas zset   ARGV[1] instance
-- Returns 1 when forgotten.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '0')
if score > now then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
