-- index_fetch.lua: agents as the hub's discovery index needs them
-- (ngx_ioa_index_sync.c): everything /retrieve_assistant shows, and who
-- holds them online.  Read only.
--
-- KEYS[1]  agents zset     B..'agents'
-- ARGV[1]  B               key base with the registry hash tag, "ioa:{reg}:"
-- ARGV[2]  "scan"          ARGV[3] a ZSCAN cursor of KEYS[1] ("0": start),
--                          ARGV[4] how many to ask ZSCAN for
--          "names"         ARGV[3..] agent names
--
-- Returns  {cursor, t1, t2, ...}: the next cursor ("0": the scan is done;
--          always "0" for names), then one 15-tuple per agent:
--            found "1"|"0", name, type, desc, tags_json, protocol "1"|"0",
--            completed, partial, failed, timed_out, latency_ms, timed,
--            holders ("holder expiry holder expiry ...", "" when none),
--            vec_model, vec (register.lua, embed_store.lua; "" when none)
--          An unknown name (names) answers found "0" and empty fields: it
--          was deleted, and the index drops it.
-- Errors   BADARG  keys not derived from B, an unknown mode
--
-- The record fields are rep_record.lua's counts as stored ("" when none),
-- the holders presence.lua's B..'holders:'..name.  A scan may return an
-- agent twice or miss one added meanwhile (ZSCAN's guarantee: every agent
-- there for the whole scan comes back); the index hears of the one added
-- meanwhile from its change event.  All keys carry the {reg} tag of KEYS[1].

local B, mode = ARGV[1], ARGV[2]
if KEYS[1] ~= B .. 'agents' then
  return redis.error_reply('BADARG KEYS[1] must be B..agents')
end

local cursor, names = '0', {}
if mode == 'scan' then
  local r = redis.call('ZSCAN', KEYS[1], ARGV[3], 'COUNT', tonumber(ARGV[4]) or 100)
  cursor = r[1]
  for i = 1, #r[2], 2 do
    names[#names + 1] = r[2][i]
  end
elseif mode == 'names' then
  for i = 3, #ARGV do
    names[#names + 1] = ARGV[i]
  end
else
  return redis.error_reply('BADARG mode must be scan or names')
end

local out = { cursor }
for _, name in ipairs(names) do
  local a = redis.call('HMGET', B .. 'agent:' .. name,
                       'type', 'desc', 'tags', 'protocol', 'created_at',
                       'vec_model', 'vec')
  if a[5] then
    local r = redis.call('HMGET', B .. 'rep:' .. name, 'completed', 'partial',
                         'failed', 'timed_out', 'latency_ms', 'timed')
    local h = redis.call('ZRANGE', B .. 'holders:' .. name, 0, -1, 'WITHSCORES')
    local tuple = { '1', name, a[1] or '', a[2] or '', a[3] or '[]', a[4] or '0',
                    r[1] or '', r[2] or '', r[3] or '', r[4] or '', r[5] or '',
                    r[6] or '', table.concat(h, ' '), a[6] or '', a[7] or '' }
    for _, v in ipairs(tuple) do
      out[#out + 1] = v
    end
  else
    for _, v in ipairs({ '0', name, '', '', '', '', '', '', '', '', '', '', '',
                         '', '' }) do
      out[#out + 1] = v
    end
  end
end
return out
