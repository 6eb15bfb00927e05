-- room_create.lua: create a room (the room half of a teamup).
--
-- KEYS[1]  meta hash       R..'meta'     R = e.g. "ioa:{room:<comm_id>}:"
-- KEYS[2]  members set     R..'members'
-- ARGV[1]  comm_id
-- ARGV[2]  team_name       "" when the team has no name
-- ARGV[3]  creator         the agent that asked for the teamup
-- ARGV[4]  now_ms          stored as created_at
-- ARGV[5]  retention_ms    the room's own retention (/teamup "retention_s"),
--                          stored as retention_ms; "" for none (the
--                          deployment's ioa_room_retention applies)
-- ARGV[6..] members        at least one; the caller includes the creator if
--                          it is to be a member (IoA: agent_names + [sender])
--
-- Returns  "OK"
-- Errors   ROOMEXISTS  the room's meta already exists (nothing changed)
--          BADARG      empty comm_id, now_ms not a number, retention_ms
--                      neither "" nor a number above 0, no member
--
-- The members set is what post.lua checks, and its existence is what makes a
-- room exist for post.lua, hence at least one member. The log stream is
-- created by the first post. Why one script: meta and members appear
-- together (with the room's own retention, so the sweep never sees a room
-- without the retention it was made with), and the existence check cannot
-- race a second create.

local comm_id, team_name, creator, now_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local keep = ARGV[5]
if comm_id == nil or comm_id == '' then
  return redis.error_reply('BADARG comm_id is empty')
end
if not tonumber(now_ms) then
  return redis.error_reply('BADARG now_ms is not a number')
end
if keep ~= nil and keep ~= '' and not ((tonumber(keep) or 0) > 0) then
  return redis.error_reply('BADARG retention_ms is neither "" nor above 0')
end
if #ARGV < 6 then
  return redis.error_reply('BADARG a room needs at least one member')
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('ROOMEXISTS room ' .. comm_id .. ' already exists')
end

-- made: when, by Redis's clock, the clock of the log's ids (created_at is
-- the caller's): a room that never spoke is placed among those that did by
-- the same clock (room_record.lua, the list of every room)
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'comm_id', comm_id, 'team_name', team_name,
           'creator', creator, 'created_at', now_ms,
           'made', tostring(t[1] * 1000 + math.floor(t[2] / 1000)))
if keep ~= '' then
  redis.call('HSET', KEYS[1], 'retention_ms', keep)
end
-- SADD in slices: Lua's unpack() has a hard limit of a few thousand values.
for i = 6, #ARGV, 1000 do
  redis.call('SADD', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
return 'OK'
