-- goal_list.lua: a page of the goal index, newest first, and the count of
-- goals per state (GET /goals, and /metrics' ioa_goals{state}).
--
-- KEYS[1]  B               the index's key base, P..'{goals}:' (see
--                          goal_index.lua for its keys)
-- ARGV[1]  state           only goals in this state; "" any
-- ARGV[2]  owner           only goals this client launched; "" anyone's
-- ARGV[3]  limit           goals on the page; "0": the counts only
-- ARGV[4]  before          a goal id: the page starts after it (the
--                          "next" of the page before); "" from the newest
--
-- Returns  { counts, goals, next }
--          counts  { state, n, ... }
--          goals   { { id, state, goal, created_at, updated_at,
--                      launched_by, parent }, ... }
--          next    the id to pass as before for the next page, "" when
--                  there is none
-- Errors   BADCURSOR  before names no goal of the index
--
-- Bounded work: a page reads at most SCAN ids.  With an owner and a state
-- together the owner's goals are filtered by state, and a page that read
-- SCAN of them without filling up ends there, with next set, so that a
-- client pages on; every other listing reads a set of exactly the goals it
-- wants (B..'st:'..state, B..'by:'..owner, B..'created').
--
-- Ties: goals launched in the same millisecond have the same score, and
-- Redis orders them by id, descending in a reverse range; the cursor is
-- the score and the id, so a page never repeats or skips one of them.

local B = KEYS[1]
local SCAN = 1000

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- BEGIN prune (the same in goal_index.lua)
local gone = redis.call('ZRANGEBYSCORE', B .. 'ended', '-inf', now,
                        'LIMIT', 0, 100)
for _, gid in ipairs(gone) do
  local f = redis.call('HMGET', B .. 'g:' .. gid, 'state', 'launched_by')
  if f[1] then
    if redis.call('HINCRBY', B .. 'count', f[1], -1) <= 0 then
      redis.call('HDEL', B .. 'count', f[1])
    end
    redis.call('ZREM', B .. 'st:' .. f[1], gid)
  end
  if f[2] and f[2] ~= '' then
    redis.call('ZREM', B .. 'by:' .. f[2], gid)
  end
  redis.call('ZREM', B .. 'created', gid)
  redis.call('ZREM', B .. 'ended', gid)
  redis.call('DEL', B .. 'g:' .. gid)
end
-- END prune

local counts = redis.call('HGETALL', B .. 'count')
local limit = tonumber(ARGV[3]) or 0
if limit <= 0 then
  return { counts, {}, '' }
end

local state, owner, before = ARGV[1] or '', ARGV[2] or '', ARGV[4] or ''
local set, filter
if owner ~= '' then
  set = B .. 'by:' .. owner
  filter = state ~= '' and state or nil
elseif state ~= '' then
  set = B .. 'st:' .. state
else
  set = B .. 'created'
end

local max, skip_score = '+inf', nil
if before ~= '' then
  local c = redis.call('HGET', B .. 'g:' .. before, 'created_at')
  if not c then
    return redis.error_reply('BADCURSOR no goal ' .. before .. ' in the index')
  end
  max, skip_score = c, tonumber(c)
end

local goals, next, read, offset = {}, '', 0, 0
local batch = limit + 1 < 100 and limit + 1 or 100
local last_read = ''

while read < SCAN do
  local ids = redis.call('ZREVRANGEBYSCORE', set, max, '-inf', 'WITHSCORES',
                         'LIMIT', offset, batch)
  if #ids == 0 then
    break
  end
  offset = offset + #ids / 2
  for i = 1, #ids, 2 do
    local gid, score = ids[i], tonumber(ids[i + 1])
    -- the cursor and the goals of its millisecond it came after
    if not (skip_score and score == skip_score and gid >= before) then
      read = read + 1
      last_read = gid
      local f = redis.call('HMGET', B .. 'g:' .. gid, 'state', 'goal',
                           'created_at', 'updated_at', 'launched_by',
                           'parent')
      if f[1] and (not filter or f[1] == filter) then
        if #goals == limit then
          -- one more exists: the page is full and has a next
          return { counts, goals, goals[#goals][1] }
        end
        goals[#goals + 1] = { gid, f[1], f[2] or '', f[3] or '', f[4] or '',
                              f[5] or '', f[6] or '' }
      end
      if read >= SCAN then
        break
      end
    end
  end
end

if read >= SCAN then
  -- a filtered listing that read its bound: go on from where it stopped
  next = #goals == limit and goals[#goals][1] or last_read
end

return { counts, goals, next }
