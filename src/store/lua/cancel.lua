-- Asks the owner of a running session to cancel its turn, and wakes it.
--
-- KEYS[1] state hash   ARGV[1] notice channel
-- ARGV[2] "PUBLISH" | "SPUBLISH" (lua/commit.lua)
-- ARGV[3] the prefix of the instances' own channels   ARGV[4] "<tenant>/<id>"
-- The owner is woken on its own channel (and on the session's, which
-- owners of older builds watch).
-- Returns "recorded", "missing", or the status of a session that does not
-- run (the caller cancels a paused one itself, with a commit).

local st = redis.call('HGET', KEYS[1], 'st')
if not st then return 'missing' end
if st ~= 'running' and st ~= 'awaiting_relay' then return st end
redis.call('HSET', KEYS[1], 'cancel', '1')
redis.call(ARGV[2], ARGV[1], 'w')
local owner = redis.call('HGET', KEYS[1], 'own')
if owner and owner ~= '' then redis.call('PUBLISH', ARGV[3] .. owner, 'w:' .. ARGV[4]) end
return 'recorded'
