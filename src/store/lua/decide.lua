-- Records a decision on a live relay for the session's owner to take up,
-- and wakes it. Only an undecided relay ("1") takes one, so of two racing
-- decisions exactly one is recorded.
--
-- KEYS[1] state hash   ARGV[1] relay id   ARGV[2] decision (JSON)
-- ARGV[3] notice channel   ARGV[4] "PUBLISH" | "SPUBLISH" (lua/commit.lua)
-- ARGV[5] the prefix of the instances' own channels   ARGV[6] "<tenant>/<id>"
-- The owner is woken on its own channel (and on the session's, which
-- owners of older builds watch).
-- Returns "recorded", "decided" (already decided or no longer live) or
-- "missing" (no such session).

if redis.call('EXISTS', KEYS[1]) == 0 then return 'missing' end
local field = 'r:' .. ARGV[1]
if redis.call('HGET', KEYS[1], field) ~= '1' then return 'decided' end
redis.call('HSET', KEYS[1], field, ARGV[2])
redis.call(ARGV[4], ARGV[3], 'w')
local owner = redis.call('HGET', KEYS[1], 'own')
if owner and owner ~= '' then redis.call('PUBLISH', ARGV[5] .. owner, 'w:' .. ARGV[6]) end
return 'recorded'
