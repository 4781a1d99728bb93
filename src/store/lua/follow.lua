-- An instance starts (ARGV[2] = "1") or stops ("0") following a session:
-- commits announce their events only while an instance other than the
-- committing one follows (lua/commit.lua reads `fw`, the number of
-- instances with a follow count, and the committer's own `f:<instance>`).
-- Counted: every start has its stop, in any order, so an instance that
-- stops one feed while it starts another still counts once. The followers
-- are fields of the state hash (commit.lua reads them with its fence), so
-- they live as long as it; a session that is gone gets no followers.
--
-- KEYS[1] state hash
-- ARGV[1] instance   ARGV[2] "1" | "0"
-- Returns 1, or 0 when the session does not exist.

if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local field = 'f:' .. ARGV[1]
if ARGV[2] == '1' then
  if redis.call('HINCRBY', KEYS[1], field, 1) == 1 then redis.call('HINCRBY', KEYS[1], 'fw', 1) end
else
  local n = redis.call('HINCRBY', KEYS[1], field, -1)
  if n <= 0 then
    redis.call('HDEL', KEYS[1], field)
    if n == 0 and redis.call('HINCRBY', KEYS[1], 'fw', -1) <= 0 then redis.call('HDEL', KEYS[1], 'fw') end
  end
end
return 1
