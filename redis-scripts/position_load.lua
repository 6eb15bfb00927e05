-- position_load.lua: the whole resume position of a cursor's version (see
-- ngx_ioa_module/transports/ngx_ioa_position.c and position_save.lua).
--
-- KEYS[1]  P{pos:<cursor>}
-- ARGV[1]  v               the version named by the client's Last-Event-ID
-- ARGV[2]  ttl             seconds the cursor lives from now (the client
--                          has moved on to a new connection and a new
--                          cursor; this one stays only for a retry)
--
-- Returns  "<comm_id>:<id>,<comm_id>:<id>,...": the newest snapshot at or
--          before v with every change after it up to v applied
-- Errors   NOPOS   the cursor or one of the versions needed is gone
--                  (expired, or older than the versions kept)
--          BADARG  a malformed number

local v, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
if not v or v < 1 or not ttl or ttl < 1 then
  return redis.error_reply('BADARG version or ttl')
end

local base = 0
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(f, 1, 1) == 's' then
    local n = tonumber(string.sub(f, 2))
    if n and n <= v and n > base then base = n end
  end
end
if base == 0 then
  return redis.error_reply('NOPOS the position is no longer known')
end

-- rooms in the snapshot's order, changes overriding, new rooms appended
local order, pos = {}, {}
local function apply(text)
  for item in string.gmatch(text, '[^,]+') do
    local room, id = string.match(item, '^(.*):([^:]+)$')
    if room then
      if pos[room] == nil then order[#order + 1] = room end
      pos[room] = id
    end
  end
end

apply(redis.call('HGET', KEYS[1], 's' .. base))
for i = base + 1, v do
  local d = redis.call('HGET', KEYS[1], 'd' .. i)
  if not d then
    return redis.error_reply('NOPOS the position is no longer known')
  end
  apply(d)
end

redis.call('EXPIRE', KEYS[1], ttl)

local out = {}
for i, room in ipairs(order) do
  out[i] = room .. ':' .. pos[room]
end
return table.concat(out, ',')
