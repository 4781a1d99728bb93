-- Extend a lease if, and only if, ARGV[1] holds it.
--
-- KEYS[1] lease string   ARGV[1] replica id   ARGV[2] lease TTL, ms
-- Returns 1 when extended, 0 when the lease is free or held by another.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
