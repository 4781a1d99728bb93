-- An instance starts (ARGV[2] = "1") or stops ("0") following a session:
-- commits announce their events only while an instance other than the
-- committing one follows (lua/commit.lua reads `fw`, the number of
-- instances with a follow count, and the committer's own `f:<instance>`).
-- Counted: every start has its stop, in any order, so an instance that
-- stops one feed while it starts another still counts once. The followers
-- are fields of the state hash (commit.lua reads them with its fence), so
-- they live as long as it; a session that is gone gets no followers.
--
-- The owner's plain appends (no script) are announced only once it knows
-- another instance follows: an instance's first follow tells the owner on
-- its own channel ("<prefix>i:<owner>", `f:<tenant>/<id>`).
--
-- KEYS[1] state hash
-- ARGV[1] instance   ARGV[2] "1" | "0"
-- ARGV[3] the prefix of the instances' own channels   ARGV[4] "<tenant>/<id>"
-- Returns 1, or 0 when the session does not exist.

if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local field = 'f:' .. ARGV[1]
if ARGV[2] == '1' then
  if redis.call('HINCRBY', KEYS[1], field, 1) == 1 then
    redis.call('HINCRBY', KEYS[1], 'fw', 1)
    local owner = redis.call('HGET', KEYS[1], 'own')
    if owner and owner ~= '' and owner ~= ARGV[1] then
      redis.call('PUBLISH', ARGV[3] .. owner, 'f:' .. ARGV[4])
    end
  end
else
  local n = redis.call('HINCRBY', KEYS[1], field, -1)
  if n <= 0 then
    redis.call('HDEL', KEYS[1], field)
    if n == 0 and redis.call('HINCRBY', KEYS[1], 'fw', -1) <= 0 then redis.call('HDEL', KEYS[1], 'fw') end
  end
end
return 1
