-- room_expire.lua: remove one room whose last envelope is older than its
-- retention; the room half of the retention sweep (ngx_ioa_retention.c).
--
-- KEYS[1]  meta hash       R..'meta'     R = e.g. "ioa:{room:<comm_id>}:"
-- KEYS[2]  members set     R..'members'
-- KEYS[3]  log stream      R..'log'
-- KEYS[4]  floor set       R..'floor'
-- KEYS[5]  chain head      R..'chain'
-- KEYS[6]  tombstone       R..'expired'  (optional: without it none is left)
-- ARGV[1]  now_ms          the caller's clock (Redis' own, as Stream ids)
-- ARGV[2]  retention_ms    the deployment's (ioa_room_retention), 0: off
-- ARGV[3]  tombstone_ms    how long KEYS[6] stays (with KEYS[6])
-- ARGV[4]  mode            optional: "delete" removes the room whatever its
--                          age (DELETE /rooms/{comm_id}, ngx_ioa_delete.c)
-- ARGV[5]  envelope        with "delete": the room's final envelope (JSON,
--                          without "id"), appended last to its log so that
--                          it gets an id after every envelope before it
-- ARGV[6]  actor           with "delete": who deleted it, for the tombstone
--
-- Returns  {"gone"}                 no such room (swept already)
--          {"live", last_ms}        its last envelope (or, without one, its
--                                   creation) is younger than its retention
--          {"live", last_ms, due_ms}  the same for a room with a retention
--                                   of its own: due_ms is when it is due
--          {"live"}                 no retention applies to it
--          {"expired", member...}   its keys are removed; the members are
--                                   for the registry half (room_forget.lua)
--          {"deleted", id, member...}  "delete": the keys are removed; id
--                                   is the final envelope's
-- Errors   BADARG  now_ms or retention_ms not a number >= 0, a tombstone
--                  without a positive tombstone_ms
--
-- The retention is the room's own (meta retention_ms, from /teamup) or
-- the deployment's, whichever is shorter: a room asks only for less than
-- the operator allows, and an operator who shortens ioa_room_retention
-- later shortens every room's.
--
-- The age comes from the log itself: a Stream id is the millisecond it was
-- written at, so the newest entry's id is the room's last activity and
-- post.lua needs no extra write. The keys go with UNLINK: a long log is
-- freed in the background, not in this script's time.
--
-- The tombstone (the ms the room expired at, with a TTL) is what tells a
-- client resuming into the room that it expired, where a room that never
-- existed is only unknown: a few dozen bytes per room, for tombstone_ms.
-- A deleted room's tombstone says so: "deleted:<ms>:<actor>" (resume and
-- reads answer room_deleted instead of room_expired).

local now, global = tonumber(ARGV[1]), tonumber(ARGV[2])
if not now or not global or global < 0 then
  return redis.error_reply('BADARG now_ms and retention_ms must be numbers, '
                           .. 'retention_ms 0 or above')
end
local tomb_ttl = tonumber(ARGV[3])
if KEYS[6] and not (tomb_ttl and tomb_ttl > 0) then
  return redis.error_reply('BADARG a tombstone needs tombstone_ms above 0')
end

if ARGV[4] == 'delete' then
  if redis.call('EXISTS', KEYS[1], KEYS[2]) == 0 then
    return {'gone'}
  end
  local id = redis.call('XADD', KEYS[3], '*', 'e', ARGV[5] or '{}')
  local out = {'deleted', id}
  for _, m in ipairs(redis.call('SMEMBERS', KEYS[2])) do
    out[#out + 1] = m
  end
  redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
  if KEYS[6] then
    redis.call('SET', KEYS[6], 'deleted:' .. tostring(now) .. ':'
               .. (ARGV[6] or '-'), 'PX', tomb_ttl)
  end
  return out
end

local last
local top = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
if #top > 0 then
  last = tonumber(string.match(top[1][1], '^(%d+)'))
end
local meta = redis.call('HMGET', KEYS[1], 'created_at', 'retention_ms')
if last == nil then
  last = tonumber(meta[1])
end

if last == nil then
  if redis.call('EXISTS', KEYS[1], KEYS[2]) == 0 then
    return {'gone'}
  end
  last = 0                    -- a room without a date: nothing to keep it by
end

local own = tonumber(meta[2])
local keep = global
if own and own > 0 and (keep == 0 or own < keep) then
  keep = own
end

if keep == 0 then
  return {'live'}
end

if last + keep > now then
  if own and own > 0 then
    return {'live', tostring(last), tostring(last + keep)}
  end
  return {'live', tostring(last)}
end

local out = {'expired'}
for _, m in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  out[#out + 1] = m
end
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
if KEYS[6] then
  redis.call('SET', KEYS[6], tostring(now), 'PX', tomb_ttl)
end
return out
