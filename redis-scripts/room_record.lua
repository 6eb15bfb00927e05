-- room_record.lua: a room's meta, members and one page of its log
-- (IoA /fetch_chat_record).
--
-- KEYS[1]  meta hash       R..'meta'     R = e.g. "ioa:{room:<comm_id>}:"
-- KEYS[2]  members set     R..'members'
-- KEYS[3]  log stream      R..'log'
-- ARGV[1]  start           last id already seen (exclusive); "-" or "" = from
--                          the beginning
-- ARGV[2]  count           max log entries, >= 1; "0" = no limit; "-1" = no
--                          log at all (the room and its members only: the
--                          access check before a fetch)
-- ARGV[3]  max_bytes       optional: the page ends before the entry that
--                          would take the envelopes past this many bytes
--                          (a page always has at least one); absent or "0":
--                          no limit
--
-- Returns  {exists "1"|"0", team_name, creator, created_at ms,
--           {member, ...} sorted, {id1, json1, id2, json2, ...}, more}
--          more: "1" when the log holds entries after the page's last,
--          "0" when the page reaches its end.
--          With count -1 an eighth element follows: the id of the log's
--          last entry, or for an empty log "<made>-0" (when the room was
--          made, by the same clock; "" for a room older than "made"): how
--          recently the room spoke, the order of the list of every room.
--          For a missing room: {"0", "", "", "", {}, {}, "0"}.
--          To page, call again with start = the last id returned.
-- Errors   BADARG  count or max_bytes not a number; a malformed start id is
--          reported by XRANGE itself ("ERR Invalid stream ID ...")
--
-- Why one script: the members and the log are read at the same instant, so a
-- member list never disagrees with the messages shown beside it.  The log
-- is read in small batches, so a page bounded by max_bytes never makes
-- Redis copy more than a batch past it: one room of big envelopes cannot
-- make a reply (and the hub's memory for it) of any size.

local BATCH = 16

local start, count = ARGV[1], tonumber(ARGV[2])
local max_bytes = tonumber(ARGV[3] or '0')
if not count or count < -1 then
  return redis.error_reply('BADARG count must be a number >= -1')
end
if not max_bytes or max_bytes < 0 then
  return redis.error_reply('BADARG max_bytes must be a number >= 0')
end

local meta = redis.call('HMGET', KEYS[1], 'team_name', 'creator', 'created_at')
if meta[3] == false then
  return { '0', '', '', '', {}, {}, '0' }
end

local members = redis.call('SMEMBERS', KEYS[2])
table.sort(members)

if count == -1 then
  local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
  local spoke = last[1] and last[1][1]
  if not spoke then
    local made = redis.call('HGET', KEYS[1], 'made')
    spoke = made and (made .. '-0') or ''
  end
  return { '1', meta[1] or '', meta[2] or '', meta[3], members, {}, '0',
           spoke }
end

-- "(" makes the start exclusive (Redis >= 6.2), so the next page never
-- repeats the last envelope of the one before.
if start == nil or start == '' or start == '-' then
  start = '-'
else
  start = '(' .. start
end

local log, n, bytes, more = {}, 0, 0, '0'
local full = false

while not full do
  local entries = redis.call('XRANGE', KEYS[3], start, '+', 'COUNT', BATCH)
  if #entries == 0 then
    break
  end
  for _, entry in ipairs(entries) do
    local fields, json = entry[2], ''
    for i = 1, #fields, 2 do
      if fields[i] == 'e' then json = fields[i + 1] end
    end
    if (count > 0 and n >= count)
       or (max_bytes > 0 and n > 0 and bytes + #json > max_bytes) then
      more, full = '1', true
      break
    end
    log[#log + 1] = entry[1]
    log[#log + 1] = json
    n, bytes = n + 1, bytes + #json
    start = '(' .. entry[1]
  end
  if #entries < BATCH then
    break
  end
end

return { '1', meta[1] or '', meta[2] or '', meta[3], members, log, more }
