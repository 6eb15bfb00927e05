-- query.lua: exact lookup of agents by name (IoA /query_assistant).
--
-- KEYS[1]  online zset     B..'online'  (name -> expiry ms)
-- ARGV[1]  B               key base with the registry hash tag, e.g. "ioa:{reg}:"
-- ARGV[2]  now_ms          an agent is online iff its online score > now_ms
-- ARGV[3..] names          one or more names, answered in this order
--
-- Returns  a flat array of 10-tuples, one per requested name, in request order:
--            found "1"|"0", name, type, desc, tags_json, created_at,
--            online "1"|"0", protocol "1"|"0", record (JSON, as retrieve.lua),
--            a2a_url ("" for none)
--          For an unknown name: "0", name, "", "", "", "", online, "0", "", "".
--          online is reported even for unknown names, since presence is kept
--          per connected name whether or not it registered.
-- Errors   BADARG  keys not derived from B, now_ms not a number, no name
--
-- Agent hashes are B..'agent:'..name, derived here; they share the {reg} hash
-- tag with KEYS[1]. One script so the answer is one consistent snapshot in one
-- round trip whatever the number of names.

-- BEGIN record (identical in query.lua and retrieve.lua)
-- An agent's task record as JSON: the outcomes the goal workers counted in
-- B..'rep:'..name (workers/worker/lua/rep_record.lua, once per task), and
-- its mean time from assignment to result (null until one is known).
local function record(B, name)
  local r = redis.call('HMGET', B .. 'rep:' .. name, 'completed', 'partial',
                       'failed', 'timed_out', 'latency_ms', 'timed')
  local timed = tonumber(r[6]) or 0
  return string.format('{"completed":%d,"partial":%d,"failed":%d,'
                       .. '"timed_out":%d,"latency_ms":%s}',
                       tonumber(r[1]) or 0, tonumber(r[2]) or 0,
                       tonumber(r[3]) or 0, tonumber(r[4]) or 0,
                       timed > 0 and tostring(math.floor((tonumber(r[5]) or 0) / timed))
                       or 'null')
end
-- END record

local B, now = ARGV[1], tonumber(ARGV[2])
if KEYS[1] ~= B .. 'online' then
  return redis.error_reply('BADARG keys do not match the key base')
end
if not now then
  return redis.error_reply('BADARG now_ms is not a number')
end
if #ARGV < 3 then
  return redis.error_reply('BADARG no name given')
end

local out = {}
for i = 3, #ARGV do
  local name = ARGV[i]
  local a = redis.call('HMGET', B .. 'agent:' .. name,
                       'type', 'desc', 'tags', 'created_at', 'protocol',
                       'a2a_url')
  local s = redis.call('ZSCORE', KEYS[1], name)
  local online = (s ~= false and tonumber(s) > now) and '1' or '0'
  if a[4] then
    out[#out + 1] = '1'
    out[#out + 1] = name
    out[#out + 1] = a[1] or ''
    out[#out + 1] = a[2] or ''
    out[#out + 1] = a[3] or '[]'
    out[#out + 1] = a[4]
    out[#out + 1] = online
    out[#out + 1] = a[5] or '0'
    out[#out + 1] = record(B, name)
    out[#out + 1] = a[6] or ''
  else
    for _, v in ipairs({ '0', name, '', '', '', '', online, '0', '', '' }) do
      out[#out + 1] = v
    end
  end
end
return out
