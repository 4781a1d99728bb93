-- Deletes a session whose turn does not run: its state hash (with its
-- inbox and followers), its conversation, its event log, its workspace
-- and its annexes, together.
-- Touches the session's keys only (one hash tag). A running session is
-- left as it is: the caller cancels it first.
--
-- KEYS[1] state hash   KEYS[2] messages list   KEYS[3] event stream
-- KEYS[4] workspace manifest   KEYS[5] workspace blobs   KEYS[6] annexes
-- Returns "deleted", "missing", or the status of a session that runs.

local st = redis.call('HGET', KEYS[1], 'st')
if not st then return 'missing' end
if st == 'running' or st == 'awaiting_relay' then return st end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
return 'deleted'
