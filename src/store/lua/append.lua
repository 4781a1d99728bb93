-- Append one batch of events to a session's log, fenced by its lease.
--
-- KEYS[1] lease string   KEYS[2] event stream
-- ARGV[1] replica id that must hold the lease
-- ARGV[2] max retained entries (exact MAXLEN)
-- ARGV[3] session TTL, ms
-- ARGV[4] notification channel
-- ARGV[5..] payloads, in order
--
-- Entry ids are "0-<seq>": with the explicit id "0-*" Redis picks the next
-- sequence number, so seqs are gapless, 1-based, and survive trimming.
-- Announces "e:<last seq>:<replica>" on the channel (the appending replica
-- feeds its own followers from memory and ignores its own notices).
-- Returns {first id, last id}, or the error NOTLEASEHOLDER with nothing
-- appended.

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('NOTLEASEHOLDER this replica does not hold the lease')
end
local first, last
for i = 5, #ARGV do
  last = redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[2], '0-*', 'e', ARGV[i])
  first = first or last
end
if not last then return {'0-0', '0-0'} end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('PUBLISH', ARGV[4], 'e:' .. string.sub(last, 3) .. ':' .. ARGV[1])
return {first, last}
