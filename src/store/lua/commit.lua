-- One transition of one session, all or nothing: the fence is checked,
-- then the state document, the new messages, the events, the owner change
-- and the inbox changes are written. Touches the session's keys only (one
-- hash tag), so it runs unchanged on Redis Cluster.
--
-- KEYS[1] state hash   KEYS[2] messages list   KEYS[3] event stream
-- KEYS[4] workspace manifest hash (path -> "digest:size:mode")
-- KEYS[5] workspace blobs hash (sha256 hex -> content)
-- ARGV[1]  fence: "absent" | "unchanged" | "owner"
-- ARGV[2]  unchanged: version                    owner: the seq the owner
--          has written up to (its plain appends of this round included)
-- ARGV[3]  unchanged / owner: epoch
-- ARGV[4]  unchanged: last seq                   owner: commit number n
-- ARGV[5]  unchanged: owner ("" for none)        owner: instance
-- ARGV[6]  owner change: "keep" | "acquire" | "release"
-- ARGV[7]  acquire: the new owner instance
-- ARGV[8]  state document ("" = events only)     ARGV[9] its status
-- ARGV[10] messages: "keep" | "append" | "replace"
-- ARGV[11] number of messages   ARGV[12] number of events
-- ARGV[13] number of relays to open   ARGV[14] number of relays to close
-- ARGV[15] flags: "c" clears the cancel request; "t" marks the start of a
--          turn's stream (ts = the seq before this commit's events); "k"
--          keeps the keys' expiry (the writer renewed them moments before)
-- ARGV[16] session TTL, ms   ARGV[17] max retained events (exact MAXLEN)
-- ARGV[18] notice channel    ARGV[19] the writing instance
-- ARGV[20] blobs written  ARGV[21] manifest entries set
-- ARGV[22] manifest entries removed  ARGV[23] blobs dropped
-- ARGV[24] "PUBLISH" | "SPUBLISH" (on a cluster the notice channel is a
--          shard channel tagged like the keys: it stays on this node)
-- ARGV[25] the prefix of the instances' own channels ("<prefix>i:"): a
--          wake-up for an instance goes to "<prefix>i:<instance>" (PUBLISH:
--          on a cluster it reaches every node)
-- ARGV[26] the session as "<tenant>/<id>" (what such a wake-up names)
-- ARGV[27..] messages, then events, then relays to open, then to close,
--          then blobs (digest, content pairs), entries (path, entry
--          pairs), removed paths, dropped digests
--
-- State hash fields: v (version), doc, st (status), own (owner instance or
-- ""), ep (epoch), cn (commit number within the epoch), seq (the last seq
-- as of the last commit: the owner's plain appends after it are in the
-- stream only), ck (seq at the last document write), ts (seq before the
-- current turn's first event), lo (the last owner), nm (messages), eps
-- (where each epoch's entries begin, "<epoch>:<first seq>;" per tenure:
-- lua/read_after.lua), r:<relay id> ("1" = undecided, else the decision),
-- cancel, and the followers (lua/follow.lua): fw (how many instances
-- follow) and f:<instance>. They are read with the fence, in the same
-- HMGET.
--
-- Event ids are "<epoch>-<seq>": the tenure that wrote the event, then its
-- gapless seq. Seqs grow across tenures, so the ids' order is the seqs'
-- order; the epoch in the high part is the fence of the owner's plain
-- appends (XADD with an explicit id, no script): an acquire moves the
-- stream's top to "<new epoch>-<seq>" (XSETID, or its first event), after
-- which Redis refuses every id of an older tenure. Logs of older builds
-- have "0-<seq>" ids, below every tenure's. An acquire's epoch is one above
-- both the state's and the log's top id's (the log of a gone session of the
-- same id may outlive its state).
--
-- Returns {"ok", version, epoch, first seq, last seq, followed elsewhere
-- (0|1)}; {"duplicate", version, epoch, last seq, followed} for an owner
-- commit already applied (its answer was lost); {"behind", last seq} when
-- the log ends before the owner's ARGV[2] (an append of its round did not
-- land: nothing written, send the round again); or {"exists"} |
-- {"changed"} | {"fenced"} with nothing written.

local h = KEYS[1]
local cur = redis.call('HMGET', h, 'v', 'ep', 'seq', 'own', 'cn', 'fw', 'f:' .. ARGV[19], 'st', 'eps')
local exists = cur[1] ~= false
local v = tonumber(cur[1] or '0')
local ep = tonumber(cur[2] or '0')
local seq = tonumber(cur[3] or '0')
local own = cur[4] or ''
local cn = tonumber(cur[5] or '0')
local followed = (tonumber(cur[6] or '0') - (cur[7] and 1 or 0) > 0) and 1 or 0

-- The owner's plain appends since the last commit are in the stream only.
local top = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
local top_ep = 0
if #top > 0 then
  local top_ep_text, top_seq_text = string.match(top[1][1], '^(%d+)-(%d+)$')
  top_ep = tonumber(top_ep_text)
  local top_seq = tonumber(top_seq_text)
  if top_seq > seq then seq = top_seq end
end

local nev = tonumber(ARGV[12])
local fence = ARGV[1]
if fence == 'absent' then
  if exists then return {'exists'} end
elseif fence == 'unchanged' then
  if not exists or v ~= tonumber(ARGV[2]) or ep ~= tonumber(ARGV[3])
     or seq ~= tonumber(ARGV[4]) or own ~= ARGV[5] then
    return {'changed'}
  end
  -- While a session runs, only its owner appends events (with ids it
  -- numbers itself); anyone else must take it over (a new epoch) first.
  if ARGV[6] == 'keep' and own ~= '' and nev > 0
     and (cur[8] == 'running' or cur[8] == 'awaiting_relay') then
    return {'changed'}
  end
elseif fence == 'owner' then
  if not exists or own ~= ARGV[5] or ep ~= tonumber(ARGV[3]) then return {'fenced'} end
  local n = tonumber(ARGV[4])
  if n <= cn then return {'duplicate', v, ep, seq, followed} end
  -- Commit numbers of a tenure are consecutive: a gap means this writer
  -- lost track of what it wrote, so it must not write on.
  if n ~= cn + 1 then return {'fenced'} end
  if seq < tonumber(ARGV[2]) then return {'behind', seq} end
  cn = n
else
  return redis.error_reply('ERR unknown fence ' .. fence)
end

local change = ARGV[6]
local previous = own
if change == 'acquire' then
  own = ARGV[7]
  -- Above the log's top as well: a log left by a gone session of this id
  -- (its keys expire one by one) may end in a later tenure's ids.
  ep = math.max(ep, top_ep) + 1
  cn = 0
elseif change == 'release' then
  own = ''
end

local nmsg = tonumber(ARGV[11])
local nopen, nclose = tonumber(ARGV[13]), tonumber(ARGV[14])
local nblob, nset, nrm, ndrop = tonumber(ARGV[20]), tonumber(ARGV[21]), tonumber(ARGV[22]), tonumber(ARGV[23])
local publish = ARGV[24]
local i = 27

-- Messages, in chunks (Lua's unpack has a stack limit). RPUSH answers
-- the list's length: no LLEN for `nm`.
local replace = ARGV[10] == 'replace'
local nm = 0
if replace then redis.call('DEL', KEYS[2]) end
local last = i + nmsg - 1
while i <= last do
  local upto = math.min(i + 999, last)
  nm = redis.call('RPUSH', KEYS[2], unpack(ARGV, i, upto))
  i = upto + 1
end

-- A new tenure fences the old one's appends: its first event, or else
-- the stream's last id, is "<new epoch>-<seq>" (a stream that does not
-- exist yet is made empty with that last id).
if change == 'acquire' and nev == 0 then
  local marker = ep .. '-' .. seq
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('XSETID', KEYS[3], marker)
  else
    redis.call('XADD', KEYS[3], 'MAXLEN', 0, marker, 'e', '')
  end
end

local first = seq + 1
local flags = ARGV[15]
for _ = 1, nev do
  seq = seq + 1
  redis.call('XADD', KEYS[3], 'MAXLEN', ARGV[17], ep .. '-' .. seq, 'e', ARGV[i])
  i = i + 1
end

local fields = {'own', own, 'ep', ep, 'cn', cn, 'seq', seq}
if string.find(flags, 't', 1, true) then
  table.insert(fields, 'ts')
  table.insert(fields, first - 1)
end
if change == 'acquire' then
  table.insert(fields, 'lo')
  table.insert(fields, own)
  table.insert(fields, 'eps')
  -- The oldest entries go past 4 KiB (a reader of a cursor before the
  -- kept ones starts lower and skips what it need not read).
  local eps = cur[9] or ''
  if #eps > 4096 then eps = string.sub(eps, string.find(eps, ';', #eps - 4096, true) + 1) end
  table.insert(fields, eps .. ep .. ':' .. first .. ';')
end
if ARGV[8] ~= '' then
  v = v + 1
  for _, f in ipairs({'v', v, 'doc', ARGV[8], 'st', ARGV[9], 'ck', seq}) do table.insert(fields, f) end
end
if nmsg > 0 or replace then
  table.insert(fields, 'nm')
  table.insert(fields, nm)
end
for _ = 1, nopen do
  table.insert(fields, 'r:' .. ARGV[i])
  table.insert(fields, '1')
  i = i + 1
end
redis.call('HSET', h, unpack(fields))
for _ = 1, nclose do
  redis.call('HDEL', h, 'r:' .. ARGV[i])
  i = i + 1
end
if string.find(flags, 'c', 1, true) then redis.call('HDEL', h, 'cancel') end

-- The workspace: blobs by digest (idempotent), then the manifest.
for _ = 1, nblob do
  redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
  i = i + 2
end
for _ = 1, nset do
  redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1])
  i = i + 2
end
for _ = 1, nrm do
  redis.call('HDEL', KEYS[4], ARGV[i])
  i = i + 1
end
for _ = 1, ndrop do
  redis.call('HDEL', KEYS[5], ARGV[i])
  i = i + 1
end

-- The session's keys live as long as it is used. A commit that writes the
-- document (every transition does, and a turn starts with one) renews
-- them, unless its writer renewed them moments before ("k": a short
-- turn's end, a few microseconds of Redis's time per chat); a commit of
-- streamed events alone need not, within a turn. A key such a commit made
-- (the conversation replaced or begun, the first file) has no expiry yet:
-- it gets one (NX) all the same.
local ttl = ARGV[16]
if (ARGV[8] ~= '' or change ~= 'keep') and not string.find(flags, 'k', 1, true) then
  redis.call('PEXPIRE', h, ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
  -- A workspace's blobs exist only beside its manifest; a session being
  -- created has a manifest only if this commit wrote one.
  if (fence ~= 'absent' or nset > 0) and redis.call('PEXPIRE', KEYS[4], ttl) == 1 then
    redis.call('PEXPIRE', KEYS[5], ttl)
  end
else
  if nmsg > 0 or replace then redis.call('PEXPIRE', KEYS[2], ttl, 'NX') end
  if nset > 0 or nblob > 0 then
    redis.call('PEXPIRE', KEYS[4], ttl, 'NX')
    redis.call('PEXPIRE', KEYS[5], ttl, 'NX')
  end
end

-- Followers on the committing instance get the events from memory; those
-- on other instances (lua/follow.lua registers them) hear of them here.
if nev > 0 and followed == 1 then
  redis.call(publish, ARGV[18], 'e:' .. seq .. ':' .. ARGV[19])
end
-- The instance that ran it until now (if alive) learns it lost it: on the
-- session's channel (watched by older builds) and on its own.
if change == 'acquire' and previous ~= '' and previous ~= own then
  redis.call(publish, ARGV[18], 'w')
  redis.call('PUBLISH', ARGV[25] .. previous, 'w:' .. ARGV[26])
end
return {'ok', v, ep, first, seq, followed}
