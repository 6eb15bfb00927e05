-- goal_index.lua: a goal's state in the hub's goal index, which GET /goals
-- lists and /metrics counts (ioa_goals{state}).
--
-- KEYS[1]  B               the index's key base, P..'{goals}:'; every key
--                          below is B..something, so one slot holds them
-- ARGV[1]  goal id
-- ARGV[2]  state           queued forming running cancelling concluded
--                          failed cancelled
-- ARGV[3]  retention ms    an ended goal leaves the index this long after
--                          it ended, as its record expires (ioa-worker
--                          --goal-retention); "0" or absent: kept
-- ARGV[4]  created_at ms   } used only when the goal is new to the index
-- ARGV[5]  goal text       } (launch, a sub-goal's spawn, or a worker
-- ARGV[6]  launched_by     } healing an index that missed the launch);
-- ARGV[7]  parent          } "" when unknown
-- ARGV[8]  in-flight cap   } a launch (nginx, "queued"): the most goals
-- ARGV[9]  counted as      } ARGV[9] (the launcher: a token's subject, or
--                          in open mode the client's address) may have in
--                          flight (ioa_limit_goals_in_flight); "0" or
--                          absent: no cap, the goal is still counted
--
-- Returns  1 written, 0 refused (the index is at that state or past it),
--          {-1, n} over the cap: the launcher has n goals in flight, and
--          nothing was written
--
-- Keys:
--   B..'g:'..id      HASH state goal created_at updated_at launched_by
--                    parent: what a listing shows (goal: its first 256
--                    bytes, cut at a character boundary)
--   B..'count'       HASH state -> goals in it
--   B..'created'     ZSET id scored by created_at: every goal, newest last
--   B..'st:'..state  ZSET the same, per state
--   B..'by:'..who    ZSET the same, per launcher (a launch token lists its
--                    own goals without reading everyone's)
--   B..'ended'       ZSET id scored by when it leaves the index
--   B..'open:'..who  ZSET the goals in flight that a launch counted as
--                    who (ARGV[9]), scored by their launch; a goal leaves
--                    it when it reaches a final state (the field
--                    'inflight' of its g: HASH says which set)
--
-- Why an index beside the goal's record: the record, P{goal:<id>}:meta,
-- has a slot of its own per goal, so counting or listing goals from it
-- would mean a SCAN of every node.  Here one call in one slot answers.
--
-- The state only moves forward, in the order meta_state.lua allows
-- (queued, forming, running, cancelling, then a final state), so writers
-- that race (nginx's cancel and a worker's "cancelled", a launch's
-- "queued" and a worker's "forming" arriving in the other order on a
-- Cluster) always leave the furthest state, and a write repeated after a
-- crash changes nothing.  The counts move with the state in the same
-- call, so they always equal the states.
--
-- The record is written first and the index after it, by the same writer;
-- on a Cluster they are in different slots, so for the moment between the
-- two (or, when the writer dies between them, until the goal's next
-- transition, or its takeover, which writes the state it finds) the index
-- lags the record.  GET /goals/<id> reads the record and is always exact.
--
-- Ended goals whose time has come are removed at the start of each call
-- (at most 100 at a time, the rest at the next call): the index expires
-- with the records without a timer of its own.
--
-- Why the in-flight cap is checked here: the count and the goal's entry
-- change in one call, so two launches at the same moment cannot both take
-- the last place, on any number of nginx instances.  A goal whose final
-- state never reaches the index (its worker died between writing the
-- record and the index, and nothing took the goal over) would hold its
-- place for ever; entries older than IN_FLIGHT_HORIZON are let go when the
-- cap is checked, so such a place comes back after a day at the latest.

local B = KEYS[1]

local RANK = { queued = 0, forming = 1, running = 2, cancelling = 3,
               concluded = 4, failed = 4, cancelled = 4 }

-- ms: the longest a place of the in-flight cap is held without the goal
-- ending (see above); as long as ioa_goal_input_timeout_max may be
local IN_FLIGHT_HORIZON = 86400000

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- BEGIN prune (the same in goal_list.lua)
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

local id, state = ARGV[1], ARGV[2]
if not RANK[state] then
  return redis.error_reply('BADARG unknown state ' .. tostring(state))
end

local gk = B .. 'g:' .. id
local cur = redis.call('HGET', gk, 'state')
local created

if cur then
  if RANK[cur] and RANK[cur] >= RANK[state] then
    return 0
  end
  created = redis.call('HGET', gk, 'created_at')
  if RANK[state] == 4 then
    local counted = redis.call('HGET', gk, 'inflight')
    if counted then
      redis.call('ZREM', B .. 'open:' .. counted, id)
      redis.call('HDEL', gk, 'inflight')
    end
  end
  redis.call('ZREM', B .. 'st:' .. cur, id)
  if redis.call('HINCRBY', B .. 'count', cur, -1) <= 0 then
    redis.call('HDEL', B .. 'count', cur)
  end
  redis.call('HSET', gk, 'state', state, 'updated_at', now)

else
  created = tonumber(ARGV[4]) or now
  local text = ARGV[5] or ''
  if #text > 256 then
    -- not inside a UTF-8 sequence: back off over continuation bytes
    local n = 256
    while n > 0 and text:byte(n + 1) >= 128 and text:byte(n + 1) < 192 do
      n = n - 1
    end
    text = text:sub(1, n)
  end
  local who = ARGV[6] or ''
  local counted = ARGV[9] or ''
  if counted ~= '' and RANK[state] < 4 then
    local open = B .. 'open:' .. counted
    local cap = tonumber(ARGV[8]) or 0
    if cap > 0 then
      redis.call('ZREMRANGEBYSCORE', open, '-inf', now - IN_FLIGHT_HORIZON)
      local n = redis.call('ZCARD', open)
      if n >= cap then
        return { -1, n }
      end
    end
    redis.call('ZADD', open, created, id)
  end
  redis.call('HSET', gk, 'state', state, 'goal', text, 'created_at', created,
             'updated_at', now, 'launched_by', who, 'parent', ARGV[7] or '')
  if counted ~= '' and RANK[state] < 4 then
    redis.call('HSET', gk, 'inflight', counted)
  end
  redis.call('ZADD', B .. 'created', created, id)
  if who ~= '' then
    redis.call('ZADD', B .. 'by:' .. who, created, id)
  end
end

redis.call('ZADD', B .. 'st:' .. state, created, id)
redis.call('HINCRBY', B .. 'count', state, 1)

local keep = tonumber(ARGV[3]) or 0
if RANK[state] == 4 and keep > 0 then
  redis.call('ZADD', B .. 'ended', now + keep, id)
end

return 1
