-- agent_forget.lua: remove an agent not seen for the retention from the
-- registry; the agent half of the retention sweep (ngx_ioa_retention.c).
--
-- KEYS[1]  agent hash      B..'agent:'..name
-- KEYS[2]  agents zset     B..'agents'
-- KEYS[3]  stats hash      B..'stats'
-- KEYS[4]  seen zset       B..'seen'    (name -> when last seen, ms)
-- ARGV[1]  B               key base with the registry hash tag, "ioa:{reg}:"
-- ARGV[2]  name
-- ARGV[3]  now_ms
-- ARGV[4]  retention_ms    > 0 (ignored with "delete")
-- ARGV[5]  mode            optional: "delete" removes the agent whether or
--                          not it is connected or was seen lately (DELETE
--                          /agents/{name}, ngx_ioa_delete.c)
--
-- Returns  {"gone"}              not registered (its seen entry is dropped)
--          {"live", last_ms}     connected now, or seen (registered,
--                                connected) within retention_ms: kept, and
--                                its seen entry moved to last_ms
--          {"forgotten", rooms}  removed; rooms: how many it was in
-- Errors   BADARG  keys not derived from B and name, bad numbers
--
-- Last seen is the latest of: the seen zset (register.lua writes it, and
-- presence.lua when an agent's last connection goes), the agent's own
-- updated_at, and its presence expiry (online zset), which covers a
-- connection whose hub died without letting it go.  An agent connected
-- right now is never removed.
--
-- Removed: its index entries (every term, online index too) and its share
-- of the BM25 statistics, exactly as register.lua would replace them, its
-- presence, its room set, its task record and the agent itself.  The rooms
-- keep its name among their members: an agent registered again under the
-- same name is a member of them again (README "What Redis holds").  A
-- deletion takes the name out of each room's members first, one script per
-- room slot (ngx_ioa_delete.c), and only then runs this, which removes the
-- room set it read them from: interrupted, a DELETE again finds the same
-- rooms and repeats every step harmlessly.

local B, name = ARGV[1], ARGV[2]
local now, keep = tonumber(ARGV[3]), tonumber(ARGV[4])
local delete = ARGV[5] == 'delete'
if name == nil or name == '' then
  return redis.error_reply('BADARG agent name is empty')
end
if KEYS[1] ~= B .. 'agent:' .. name or KEYS[2] ~= B .. 'agents'
   or KEYS[3] ~= B .. 'stats' or KEYS[4] ~= B .. 'seen' then
  return redis.error_reply('BADARG keys do not match the key base and agent name')
end
if not now or not keep or (keep <= 0 and not delete) then
  return redis.error_reply('BADARG now_ms and retention_ms must be numbers, '
                           .. 'retention_ms above 0')
end

local a = redis.call('HMGET', KEYS[1], 'terms', 'len', 'updated_at', 'name')
if not a[4] then
  redis.call('ZREM', KEYS[4], name)
  return {'gone'}
end

if not delete then
  local online = tonumber(redis.call('ZSCORE', B .. 'online', name) or '0')
                 or 0
  if online > now then
    redis.call('ZADD', KEYS[4], now, name)
    return {'live', string.format('%d', now)}
  end

  local last = math.max(tonumber(redis.call('ZSCORE', KEYS[4], name) or '0')
                        or 0, tonumber(a[3]) or 0, online)
  if last + keep > now then
    redis.call('ZADD', KEYS[4], last, name)
    return {'live', string.format('%d', last)}
  end
end

for t in (a[1] or ''):gmatch('%S+') do
  redis.call('ZREM', B .. 'idx:' .. t, name)
  redis.call('HDEL', B .. 'tf:' .. t, name)
  redis.call('ZREM', B .. 'oidx:' .. t, name)
end
redis.call('ZREM', B .. 'onidx', name)
redis.call('ZREM', B .. 'online', name)
redis.call('ZREM', KEYS[2], name)
redis.call('ZREM', KEYS[4], name)
redis.call('HINCRBY', KEYS[3], 'n', -1)
local len = tonumber(a[2]) or 0
if len ~= 0 then
  redis.call('HINCRBY', KEYS[3], 'total_len', -len)
end
local rooms = redis.call('SCARD', B .. 'rooms:' .. name)
redis.call('UNLINK', KEYS[1], B .. 'rooms:' .. name, B .. 'rep:' .. name,
           B .. 'holders:' .. name)
-- every hub's discovery index drops it (ngx_ioa_index_sync.c)
redis.call('SPUBLISH', B .. 'index', 'c' .. name)
return {'forgotten', rooms}
