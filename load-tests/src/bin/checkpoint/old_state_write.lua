-- Create or compare-and-set a session's state document, applying a lease
-- operation atomically with it. Touches one session's keys only.
--
-- KEYS[1] state hash {v, doc}   KEYS[2] lease string   KEYS[3] event stream
-- ARGV[1] mode: "create" (state must not exist) | "cas" (v must equal ARGV[2])
-- ARGV[2] expected version (cas only)
-- ARGV[3] document
-- ARGV[4] session TTL, ms
-- ARGV[5] lease op: "none" | "acquire" | "require" | "release"
-- ARGV[6] replica id (lease ops)
-- ARGV[7] lease TTL, ms (acquire, require)
--
-- Returns the new version (> 0), -1 for a version conflict, -2 for a lease
-- conflict. Every condition is checked before anything is written.

local current = redis.call('HGET', KEYS[1], 'v')
local version
if ARGV[1] == 'create' then
  if current then return -1 end
  version = 1
else
  if not current or current ~= ARGV[2] then return -1 end
  version = tonumber(current) + 1
end

local op, replica = ARGV[5], ARGV[6]
if op ~= 'none' then
  local holder = redis.call('GET', KEYS[2])
  if op == 'acquire' then
    if holder and holder ~= replica then return -2 end
    redis.call('SET', KEYS[2], replica, 'PX', ARGV[7])
  elseif op == 'require' then
    if holder ~= replica then return -2 end
    redis.call('PEXPIRE', KEYS[2], ARGV[7])
  elseif op == 'release' then
    if holder and holder ~= replica then return -2 end
    redis.call('DEL', KEYS[2])
  else
    return redis.error_reply('ERR unknown lease op ' .. op)
  end
end

redis.call('HSET', KEYS[1], 'v', string.format('%d', version), 'doc', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
-- The log lives as long as the state it belongs to (no-op when empty).
redis.call('PEXPIRE', KEYS[3], ARGV[4])
return version
