-- room_forget.lua: the registry half of removing a room (after
-- room_expire.lua removed its keys): out of every member's room set and
-- out of the room indexes.
--
-- KEYS[1]  room index      B..'roomlist'  (comm_id -> ms)
-- KEYS[2]  due index       B..'roomdue'   (comm_id -> ms it is due;
--                          optional: rooms with a retention of their own)
-- ARGV[1]  B               key base with the registry hash tag, "ioa:{reg}:"
-- ARGV[2]  comm_id
-- ARGV[3..] members        as room_expire.lua returned them
--
-- Returns  the number of member sets the room was removed from
-- Errors   BADARG  keys not derived from B, empty comm_id
--
-- Room sets are B..'rooms:'..name (teamup_members.lua), in the {reg} slot
-- with the index, so one script does both. Run again with the same
-- arguments it changes nothing: the sweep may repeat it after a lost reply.

local B, comm_id = ARGV[1], ARGV[2]
if KEYS[1] ~= B .. 'roomlist'
   or (KEYS[2] and KEYS[2] ~= B .. 'roomdue') then
  return redis.error_reply('BADARG keys do not match the key base')
end
if comm_id == nil or comm_id == '' then
  return redis.error_reply('BADARG comm_id is empty')
end

local n = 0
for i = 3, #ARGV do
  n = n + redis.call('SREM', B .. 'rooms:' .. ARGV[i], comm_id)
end
redis.call('ZREM', KEYS[1], comm_id)
if KEYS[2] then
  redis.call('ZREM', KEYS[2], comm_id)
end
return n
