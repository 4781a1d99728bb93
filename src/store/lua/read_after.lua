-- Read a page of a session's log plus its retained bounds, in one snapshot.
--
-- KEYS[1] event stream
-- ARGV[1] start: "-" (from the beginning) or "(0-<after>" (exclusive)
-- ARGV[2] max entries
--
-- Returns {first retained id, last id, entries}; {"0-0", "0-0", {}} when the
-- log does not exist. Trimming always keeps the newest entry, so the last
-- entry's id is the last seq ever appended.

local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
if #first == 0 then return {'0-0', '0-0', {}} end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])
return {first[1][1], last[1][1], entries}
