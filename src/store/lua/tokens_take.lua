-- Adds model tokens to a tenant's count for one minute: a reservation
-- (checked against the limit) before a model call, a correction (may be
-- negative, never checked) after it.
-- KEYS[1] the tenant's counter for this minute
-- ARGV[1] tokens, ARGV[2] limit (0 = no check)
-- Returns {1, used} when taken, {0, used} when it would pass the limit.
local tokens = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if limit > 0 and tokens > 0 and used + tokens > limit then
  return {0, used}
end
local now_used = redis.call('INCRBY', KEYS[1], tokens)
redis.call('EXPIRE', KEYS[1], 120)
return {1, now_used}
