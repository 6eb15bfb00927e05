-- room_goals.lua: the goals that ran in a room, one batch of its log per
-- call: an erasure's first pass (ngx_ioa_room_erase.c), which has to know
-- them before it changes anything.
--
-- KEYS[1]  log stream      R..'log'      R = e.g. "ioa:{room:<comm_id>}:"
-- ARGV[1]  cursor          "" to start, else the last id already read
-- ARGV[2]  count           entries per call, >= 1
--
-- Returns  {cursor, goal_id...}: the goals named in this batch, each once;
--          cursor "" when the log's end was reached
--
-- Every step a goal's coordinator posts carries "ioa_goal" (the goal's id,
-- workers/worker/goal.c), and only the coordinator's can: the hub drops
-- ioa_* members from clients' envelopes.  So the log says which goals ran
-- in the room, those of any worker version too, and no index has to be
-- kept beside it.  A goal whose every step the log has trimmed away
-- (ioa_room_log_maxlen) is not found (README "Erasure").

local count = tonumber(ARGV[2])
if not count or count < 1 then
  return redis.error_reply('BADARG count must be a number >= 1')
end

local start = '-'
if ARGV[1] ~= '' then start = '(' .. ARGV[1] end
local entries = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', count)

local out, seen = { '' }, {}
for _, entry in ipairs(entries) do
  local f = entry[2]
  for i = 1, #f, 2 do
    local e = f[i + 1]
    if f[i] == 'e' and string.find(e, '"ioa_goal"', 1, true) then
      local ok, v = pcall(cjson.decode, e)
      if ok and type(v) == 'table' and type(v.ioa_goal) == 'string'
         and v.ioa_goal ~= '' and not seen[v.ioa_goal] then
        seen[v.ioa_goal] = true
        out[#out + 1] = v.ioa_goal
      end
    end
  end
end

if #entries == count then out[1] = entries[#entries][1] end
return out
