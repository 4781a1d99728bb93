-- Every file of a session's workspace with its content, read at once (a
-- commit between two reads could drop a blob the manifest still named).
-- Touches the session's keys only (one hash tag).
--
-- KEYS[1] workspace manifest hash   KEYS[2] workspace blobs hash
-- Returns a flat array: path, entry ("digest:size:mode"), content, ...

local manifest = redis.call('HGETALL', KEYS[1])
local out = {}
for j = 1, #manifest, 2 do
  local path, entry = manifest[j], manifest[j + 1]
  local digest = string.match(entry, '^([0-9a-f]+):')
  local content = digest and redis.call('HGET', KEYS[2], digest) or false
  table.insert(out, path)
  table.insert(out, entry)
  table.insert(out, content or '')
  if not content then table.insert(out, 'missing') else table.insert(out, 'ok') end
end
return out
