-- agent_rooms.lua: the rooms an agent is in, a batch at a time, and Redis'
-- clock right now.
--
-- KEYS[1]  B..'rooms:'..name   SET of comm_ids
-- ARGV[1]  cursor          "0" for the first batch, then the one returned
-- ARGV[2]  count           rooms per batch (a hint, as SSCAN's COUNT: a
--                          small set comes whole)
--
-- Returns  {now_ms (string), {comm_id, ...}, cursor}: cursor "0" when
--          this was the last batch
--
-- Batches, because every room becomes a subscription and a read for the
-- connection: the hub links one batch, then asks for the next, so another
-- client's commands are never stuck behind thousands of one agent's.  A
-- room added or removed meanwhile may be missed or seen once more (SSCAN's
-- guarantee); the teamup event links a new room anyway.
--
-- A connection that does not resume receives what is appended after it
-- connected.  Room Stream ids are Redis-clock milliseconds, so Redis' own
-- clock, read in the same step as the room list and before any envelope the
-- connection sends (a worker's commands run in order), is the exact start:
-- every envelope appended later has an id at or above now_ms.  Reading
-- nginx's clock instead would be off by the skew between the two hosts.

local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local r = redis.call('SSCAN', KEYS[1], ARGV[1] or '0', 'COUNT',
                     tonumber(ARGV[2] or '100') or 100)
return { string.format('%d', ms), r[2], r[1] }
