-- An instance starts (ARGV[2] = "1") or stops ("0") following a session:
-- commits announce their events only while an instance other than the
-- committing one follows (lua/commit.lua reads `fw`, the number of
-- instances with a follow count, and the committer's own `f:<instance>`).
-- Counted: every start has its stop, in any order, so an instance that
-- stops one feed while it starts another still counts once. The followers
-- are kept beside the state, not in it, and live as long as it; a session
-- that is gone gets no followers.
--
-- KEYS[1] state hash   KEYS[2] followers hash
-- ARGV[1] instance   ARGV[2] "1" | "0"
-- Returns 1, or 0 when the session does not exist.

local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then return 0 end
local field = 'f:' .. ARGV[1]
if ARGV[2] == '1' then
  if redis.call('HINCRBY', KEYS[2], field, 1) == 1 then redis.call('HINCRBY', KEYS[2], 'fw', 1) end
else
  local n = redis.call('HINCRBY', KEYS[2], field, -1)
  if n <= 0 then
    redis.call('HDEL', KEYS[2], field)
    if n == 0 then redis.call('HINCRBY', KEYS[2], 'fw', -1) end
  end
end
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return 1
