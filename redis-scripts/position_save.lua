-- position_save.lua: one version of an SSE inbox's resume position (see
-- ngx_ioa_module/transports/ngx_ioa_position.c).
--
-- KEYS[1]  P{pos:<cursor>}   HASH of the cursor's versions:
--                            "s<v>" the whole position at version v,
--                            "d<v>" what changed from version v - 1
-- ARGV[1]  v               the version written (>= 1)
-- ARGV[2]  kind            "s" (a snapshot) or "d" (a change)
-- ARGV[3]  text            "<comm_id>:<id>,<comm_id>:<id>,..."
-- ARGV[4]  keep            versions that stay resolvable (v - keep + 1 .. v)
-- ARGV[5]  ttl             seconds the cursor lives after its last write
--
-- Returns  the number of fields the cursor holds
-- Errors   BADARG  a malformed number or kind
--
-- Why it is kept: an event id names a version, and a client may come back
-- with any id it has received, also one sent long before the connection
-- died (bytes in flight).  A version is rebuilt from the newest snapshot
-- at or before it and the changes after that snapshot, so what stays is
-- the newest snapshot at or before the oldest version kept (v - keep + 1),
-- everything after it, and nothing before.

local v, keep, ttl = tonumber(ARGV[1]), tonumber(ARGV[4]), tonumber(ARGV[5])
local kind = ARGV[2]
if not v or v < 1 or not keep or keep < 1 or not ttl or ttl < 1
   or (kind ~= 's' and kind ~= 'd') then
  return redis.error_reply('BADARG version, keep, ttl or kind')
end

redis.call('HSET', KEYS[1], kind .. v, ARGV[3])

local oldest = v - keep + 1
if oldest > 1 then
  local fields = redis.call('HKEYS', KEYS[1])
  local base = 0
  for _, f in ipairs(fields) do
    local n = tonumber(string.sub(f, 2))
    if string.sub(f, 1, 1) == 's' and n and n <= oldest and n > base then
      base = n
    end
  end
  local olds = {}
  for _, f in ipairs(fields) do
    local kind_f, n = string.sub(f, 1, 1), tonumber(string.sub(f, 2))
    if n and ((kind_f == 's' and n < base) or (kind_f == 'd' and n <= base)) then
      olds[#olds + 1] = f
    end
  end
  if #olds > 0 then
    redis.call('HDEL', KEYS[1], unpack(olds))
  end
end

redis.call('EXPIRE', KEYS[1], ttl)
return redis.call('HLEN', KEYS[1])
