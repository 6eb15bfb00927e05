-- room_expire.lua: remove one room whose last envelope is older than the
-- retention; the room half of the retention sweep (ngx_ioa_retention.c).
--
-- KEYS[1]  meta hash       R..'meta'     R = e.g. "ioa:{room:<comm_id>}:"
-- KEYS[2]  members set     R..'members'
-- KEYS[3]  log stream      R..'log'
-- KEYS[4]  floor set       R..'floor'
-- KEYS[5]  chain head      R..'chain'
-- ARGV[1]  now_ms          the caller's clock (Redis' own, as Stream ids)
-- ARGV[2]  retention_ms    > 0
--
-- Returns  {"gone"}                 no such room (swept already)
--          {"live", last_ms}        its last envelope (or, without one, its
--                                   creation) is younger than retention_ms
--          {"expired", member...}   its keys are removed; the members are
--                                   for the registry half (room_forget.lua)
-- Errors   BADARG  now_ms or retention_ms not a positive number
--
-- The age comes from the log itself: a Stream id is the millisecond it was
-- written at, so the newest entry's id is the room's last activity and
-- post.lua needs no extra write. The keys go with UNLINK: a long log is
-- freed in the background, not in this script's time.

local now, keep = tonumber(ARGV[1]), tonumber(ARGV[2])
if not now or not keep or keep <= 0 then
  return redis.error_reply('BADARG now_ms and retention_ms must be numbers, '
                           .. 'retention_ms above 0')
end

local last
local top = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
if #top > 0 then
  last = tonumber(string.match(top[1][1], '^(%d+)'))
else
  last = tonumber(redis.call('HGET', KEYS[1], 'created_at'))
end

if last == nil then
  if redis.call('EXISTS', KEYS[1], KEYS[2]) == 0 then
    return {'gone'}
  end
  last = 0                    -- a room without a date: nothing to keep it by
end

if last + keep > now then
  return {'live', tostring(last)}
end

local out = {'expired'}
for _, m in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  out[#out + 1] = m
end
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
return out
