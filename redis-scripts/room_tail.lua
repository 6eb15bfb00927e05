-- room_tail.lua: one step of the walk back from a room log's end to where
-- its newest page starts (/fetch_chat_record without a page: IoA's
-- frontend shows a long room's latest conversation, see ngx_ioa_record.c).
--
-- KEYS[1]  log stream      R..'log'      R = e.g. "ioa:{room:<comm_id>}:"
-- ARGV[1]  below           the walk goes on below this id (exclusive);
--                          "+" = from the log's end
-- ARGV[2]  want            entries still to walk over, >= 1
-- ARGV[3]  max_bytes       this step ends once it has walked over this many
--                          bytes of envelopes (at least one entry), >= 1
--
-- Returns  {walked, last, reached}
--          walked   entries walked over in this step (0 .. want)
--          last     the id of the last (oldest) one walked over, or ""
--          reached  "1": want entries were walked over, "0": the log's
--                   start came first (it holds fewer than want below),
--                   "" : neither yet; the next step goes on below last
-- Errors   BADARG   want or max_bytes not a number >= 1
--
-- Why steps: the newest page of a room can be thousands of envelopes, and
-- a Stream is found by id, not by position, so its start is found by
-- reading back over them.  A script holds Redis while it runs; a step
-- reads at most max_bytes (and a batch past it), so one long room of big
-- envelopes never holds Redis for long, the same bound as a piece of the
-- answer (room_record.lua).  The hub asks for want = page + 1: the entry
-- one below the page is the exclusive start of the page, and its presence
-- says the room goes on before the page.

local BATCH = 16

local below, want = ARGV[1], tonumber(ARGV[2])
local max_bytes = tonumber(ARGV[3])
if not want or want < 1 then
  return redis.error_reply('BADARG want must be a number >= 1')
end
if not max_bytes or max_bytes < 1 then
  return redis.error_reply('BADARG max_bytes must be a number >= 1')
end

-- "(" makes the end exclusive (Redis >= 6.2)
local stop = below
if stop ~= '+' then
  stop = '(' .. stop
end

local walked, bytes, last = 0, 0, ''

while true do
  local n = math.min(BATCH, want - walked)
  local entries = redis.call('XREVRANGE', KEYS[1], stop, '-', 'COUNT', n)
  for _, entry in ipairs(entries) do
    local fields = entry[2]
    for i = 2, #fields, 2 do
      bytes = bytes + #fields[i]
    end
    walked, last = walked + 1, entry[1]
    stop = '(' .. entry[1]
  end
  if walked == want then
    return { walked, last, '1' }
  end
  if #entries < n then
    return { walked, last, '0' }
  end
  if bytes >= max_bytes then
    return { walked, last, '' }
  end
end
