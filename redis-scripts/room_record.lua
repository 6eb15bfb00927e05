-- room_record.lua: a room's meta, members and one page of its log
-- (IoA /fetch_chat_record, and resume after a reconnect).
--
-- KEYS[1]  meta hash       R..'meta'     R = e.g. "ioa:{room:<comm_id>}:"
-- KEYS[2]  members set     R..'members'
-- KEYS[3]  log stream      R..'log'
-- ARGV[1]  start           last id already seen (exclusive); "-" or "" = from
--                          the beginning
-- ARGV[2]  count           max log entries, >= 1; "0" = no limit
--
-- Returns  {exists "1"|"0", team_name, creator, created_at ms,
--           {member, ...} sorted, {id1, json1, id2, json2, ...}}
--          For a missing room: {"0", "", "", "", {}, {}}.
--          To page, call again with start = the last id returned; a page
--          shorter than count is the end.
-- Errors   BADARG  count not a number >= 0; a malformed start id is reported
--          by XRANGE itself ("ERR Invalid stream ID ...")
--
-- Why one script: the members and the log are read at the same instant, so a
-- member list never disagrees with the messages shown beside it.

local start, count = ARGV[1], tonumber(ARGV[2])
if not count or count < 0 then
  return redis.error_reply('BADARG count must be a number >= 0')
end

local meta = redis.call('HMGET', KEYS[1], 'team_name', 'creator', 'created_at')
if meta[3] == false then
  return { '0', '', '', '', {}, {} }
end

local members = redis.call('SMEMBERS', KEYS[2])
table.sort(members)

-- "(" makes the start exclusive (Redis >= 6.2), so a resume never repeats the
-- last envelope the client already has.
if start == nil or start == '' or start == '-' then
  start = '-'
else
  start = '(' .. start
end
local entries
if count > 0 then
  entries = redis.call('XRANGE', KEYS[3], start, '+', 'COUNT', count)
else
  entries = redis.call('XRANGE', KEYS[3], start, '+')
end

local log = {}
for _, entry in ipairs(entries) do
  local fields, json = entry[2], ''
  for i = 1, #fields, 2 do
    if fields[i] == 'e' then json = fields[i + 1] end
  end
  log[#log + 1] = entry[1]
  log[#log + 1] = json
end

return { '1', meta[1] or '', meta[2] or '', meta[3], members, log }
