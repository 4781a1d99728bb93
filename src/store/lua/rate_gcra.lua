-- One request against a tenant's cross-replica rate: GCRA (the algorithm
-- behind governor), with the theoretical arrival time in one key and the
-- server's clock, so replicas' clocks do not matter.
-- KEYS[1] the tenant's TAT key
-- ARGV[1] emission interval in microseconds (1e6 / rate)
-- ARGV[2] burst (requests that may arrive at once)
-- Returns {1, remaining} when allowed, {0, retry_after_ms} when limited.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = (tonumber(ARGV[2]) - 1) * interval
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then
  tat = now
end
if now < tat - tolerance then
  return {0, math.ceil((tat - tolerance - now) / 1000)}
end
local new_tat = tat + interval
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1000)
return {1, math.floor((now + tolerance - new_tat) / interval) + 1}
