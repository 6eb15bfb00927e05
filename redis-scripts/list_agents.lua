-- list_agents.lua: one page of the registry (IoA /list_all_agents).
--
-- KEYS[1]  agents zset     B..'agents'  (name -> created ms)
-- KEYS[2]  online zset     B..'online'  (name -> expiry ms)
-- ARGV[1]  B               key base with the registry hash tag, e.g. "ioa:{reg}:"
-- ARGV[2]  now_ms          an agent is online iff its online score > now_ms
-- ARGV[3]  offset          0-based index of the first agent, >= 0
-- ARGV[4]  count           agents in this page, >= 0 (0 = just the total)
--
-- Returns  {total, name, type, desc, tags_json, created_at, online, protocol,
--           a2a_url, ...}
--          total is an integer (all registered agents); then one 8-tuple of
--          strings per agent, oldest registration first, ties by name (the
--          zset order: score, then member bytes).
-- Errors   BADARG  keys not derived from B, bad now_ms/offset/count
--
-- Agent hashes are derived from B and share the {reg} hash tag with the
-- declared keys. One script so the total and the page agree.

local B, now = ARGV[1], tonumber(ARGV[2])
local offset, count = tonumber(ARGV[3]), tonumber(ARGV[4])
if KEYS[1] ~= B .. 'agents' or KEYS[2] ~= B .. 'online' then
  return redis.error_reply('BADARG keys do not match the key base')
end
if not now then
  return redis.error_reply('BADARG now_ms is not a number')
end
if not offset or offset < 0 or not count or count < 0 then
  return redis.error_reply('BADARG offset and count must be numbers >= 0')
end

local out = { redis.call('ZCARD', KEYS[1]) }
if count == 0 then
  return out
end

local names = redis.call('ZRANGE', KEYS[1], offset, offset + count - 1)
for _, name in ipairs(names) do
  local a = redis.call('HMGET', B .. 'agent:' .. name,
                       'type', 'desc', 'tags', 'created_at', 'protocol',
                       'a2a_url')
  local s = redis.call('ZSCORE', KEYS[2], name)
  out[#out + 1] = name
  out[#out + 1] = a[1] or ''
  out[#out + 1] = a[2] or ''
  out[#out + 1] = a[3] or '[]'
  out[#out + 1] = a[4] or ''
  out[#out + 1] = (s ~= false and tonumber(s) > now) and '1' or '0'
  out[#out + 1] = a[5] or '0'
  out[#out + 1] = a[6] or ''
end
return out
