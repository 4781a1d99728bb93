-- Read a page of a session's log plus its retained bounds, in one snapshot.
--
-- KEYS[1] event stream   KEYS[2] state hash
-- ARGV[1] after: the page holds events with a greater seq
-- ARGV[2] max entries
--
-- Entry ids are "<epoch>-<seq>" (lua/commit.lua): the page starts in the
-- epoch that wrote seq after + 1, found in the state's `eps` ("<epoch>:
-- <first seq>;" per tenure, oldest first); epoch 0 before the first listed
-- (logs of older builds, sessions created without an owner). Entries of
-- later epochs all have greater seqs; an entry with seq <= after (a cursor
-- older than the kept `eps`) is skipped.
--
-- Returns {first retained id, last id, entries}; {"0-0", "0-0", {}} when the
-- log has no entry. Trimming always keeps the newest entry, so the last
-- entry's id holds the last seq ever appended.

local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
if #first == 0 then return {'0-0', '0-0', {}} end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local after = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local start = '-'
if after > 0 then
  local epoch = '0'
  for e, f in string.gmatch(redis.call('HGET', KEYS[2], 'eps') or '', '(%d+):(%d+);') do
    if tonumber(f) > after + 1 then break end
    epoch = e
  end
  start = '(' .. epoch .. '-' .. after
end
-- Entries with seq <= after come first (only for a cursor older than the
-- kept `eps`): skipped, a page at a time.
local function seq_of(id) return tonumber(string.match(id, '-(%d+)$')) end
local entries = {}
while #entries < limit do
  local want = limit - #entries
  local page = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', want)
  for _, entry in ipairs(page) do
    if seq_of(entry[1]) > after then entries[#entries + 1] = entry end
  end
  if #page < want then break end
  start = '(' .. page[#page][1]
end
return {first[1][1], last[1][1], entries}
