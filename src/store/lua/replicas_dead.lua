-- Instances whose last beat lapsed, by the server's clock; with ARGV[2] set,
-- whether that one instance is alive instead (1 or 0).
--
-- KEYS[1] replicas zset   ARGV[1] limit   ARGV[2] instance or ""

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[2] ~= '' then
  local score = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[2]) or '0')
  if score > now then return 1 end
  return 0
end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now), 'LIMIT', 0, ARGV[1])
