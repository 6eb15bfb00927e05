-- agent_rooms.lua: the rooms an agent is in, and Redis' clock right now.
--
-- KEYS[1]  B..'rooms:'..name   SET of comm_ids
--
-- Returns  {now_ms (string), {comm_id, ...}}
--
-- A connection that does not resume receives what is appended after it
-- connected.  Room Stream ids are Redis-clock milliseconds, so Redis' own
-- clock, read in the same step as the room list and before any envelope the
-- connection sends (a worker's commands run in order), is the exact start:
-- every envelope appended later has an id at or above now_ms.  Reading
-- nginx's clock instead would be off by the skew between the two hosts.

local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return { string.format('%d', ms), redis.call('SMEMBERS', KEYS[1]) }
