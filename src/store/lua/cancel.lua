-- Asks the owner of a running session to cancel its turn, and wakes it.
--
-- KEYS[1] state hash   ARGV[1] notice channel
-- ARGV[2] "PUBLISH" | "SPUBLISH" (lua/commit.lua)
-- Returns "recorded", "missing", or the status of a session that does not
-- run (the caller cancels a paused one itself, with a commit).

local st = redis.call('HGET', KEYS[1], 'st')
if not st then return 'missing' end
if st ~= 'running' and st ~= 'awaiting_relay' then return st end
redis.call('HSET', KEYS[1], 'cancel', '1')
redis.call(ARGV[2], ARGV[1], 'w')
return 'recorded'
