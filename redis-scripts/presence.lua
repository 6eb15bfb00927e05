-- presence.lua: a holder (one nginx worker) marks agents online until a time,
-- or lets them go.
--
-- KEYS[1]  online zset     B..'online'  (name -> expiry ms)
-- ARGV[1]  B               registry key base, e.g. "ioa:{reg}:"
-- ARGV[2]  holder          the calling worker's id (unique per process)
-- ARGV[3]  expiry_ms       > 0: this holder keeps each name online until
--                          then; "0": this holder no longer holds the names
-- ARGV[4]  now_ms          the caller's clock
-- ARGV[5..] names          zero or more agent names
--
-- Returns  the number of names given (integer)
-- Errors   BADARG  a malformed number, an empty holder, or wrong keys
--
-- An agent may be connected to several workers and instances at once (a
-- reconnect that lands elsewhere before the old connection is noticed).  So
-- presence is per holder: B..'holders:'..name maps holder -> expiry, and the
-- online zset carries, per name, the latest expiry of any holder.  A worker
-- that loses its last connection of an agent removes only itself; the agent
-- stays online while another holder's expiry lies ahead.  A worker that dies
-- simply stops renewing and its entries run out.
--
-- The online index: B..'onidx' (name -> the same expiry as in online) lists
-- the agents indexed as online, and for each of them B..'oidx:'..term holds
-- a copy of its entry of the term's sorted set (see register.lua), so that
-- retrieve.lua's online_only reads only online agents.  An agent enters the
-- index when it comes online (ZADD onidx reports it new) and leaves it when
-- its last holder lets it go, or, for a holder that died, once its expiry is
-- ONIDX_GRACE past (a sweep of at most ONIDX_SWEEP names per heartbeat).
-- retrieve.lua still checks the expiry of every agent it finds there, so a
-- late sweep costs time, not correctness; an online agent must never be
-- missing, hence the grace: other instances' clocks may be behind ours.
-- All keys are derived from B and share the {reg} tag of KEYS[1], so this
-- stays one slot on a Cluster.

local base, holder = ARGV[1], ARGV[2]
local expiry, now = tonumber(ARGV[3]), tonumber(ARGV[4])
if not expiry or expiry < 0 or not now or holder == '' then
  return redis.error_reply('BADARG expiry_ms and now_ms must be numbers, holder non-empty')
end
if KEYS[1] ~= base .. 'online' then
  return redis.error_reply('BADARG KEYS[1] must be B..online')
end

local day = 86400000
local ONIDX_GRACE, ONIDX_SWEEP = 600000, 100
local onidx = base .. 'onidx'

-- Copy the agent's entries into the online index, or drop them from it.
local function online_index(name, on)
  local a = redis.call('HGET', base .. 'agent:' .. name, 'terms')
  for t in (a or ''):gmatch('%S+') do
    if on then
      local v = redis.call('HGET', base .. 'tf:' .. t, name)
      if v then
        redis.call('ZADD', base .. 'oidx:' .. t, v, name)
      end
    else
      redis.call('ZREM', base .. 'oidx:' .. t, name)
    end
  end
end

for i = 5, #ARGV do
  local name = ARGV[i]
  local hkey = base .. 'holders:' .. name
  if expiry > 0 then
    redis.call('ZADD', hkey, expiry, holder)
    redis.call('PEXPIRE', hkey, math.max(expiry - now, 0) + day)
    redis.call('ZADD', KEYS[1], 'GT', expiry, name)
    if redis.call('ZADD', onidx, 'GT', expiry, name) == 1 then
      online_index(name, true)
    end
  else
    redis.call('ZREM', hkey, holder)
    local top = redis.call('ZREVRANGE', hkey, 0, 0, 'WITHSCORES')
    if top[2] and tonumber(top[2]) > now then
      redis.call('ZADD', KEYS[1], top[2], name)
      if redis.call('ZADD', onidx, top[2], name) == 1 then
        online_index(name, true)
      end
    else
      redis.call('ZREM', KEYS[1], name)
      -- its last connection went: when it was last seen (agent_forget.lua),
      -- for a registered agent only (a deleted one's connections close
      -- after its entries went: nothing of it is left behind)
      if redis.call('EXISTS', base .. 'agent:' .. name) == 1 then
        redis.call('ZADD', base .. 'seen', 'GT', now, name)
      end
      if redis.call('ZREM', onidx, name) == 1 then
        online_index(name, false)
      end
    end
  end
end

-- every hub's discovery index keeps the same pairs (ngx_ioa_index_sync.c):
-- "p<holder>\n<expiry>\n<name>\n<name>..." (names have no control
-- character, holders neither)
if #ARGV >= 5 then
  redis.call('SPUBLISH', base .. 'index',
             'p' .. holder .. '\n' .. ARGV[3] .. '\n'
             .. table.concat(ARGV, '\n', 5))
end

-- entries that expired a day ago read as offline anyway; dropping them keeps
-- the set from growing with every name that ever connected
if expiry > 0 then
  -- (their holder died without letting them go: last seen at that expiry)
  local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf',
                         '(' .. string.format('%d', now - day), 'WITHSCORES')
  for i = 1, #old, 2 do
    redis.call('ZADD', base .. 'seen', 'GT', old[i + 1], old[i])
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now - day))
  local gone = redis.call('ZRANGEBYSCORE', onidx, '-inf',
                          '(' .. string.format('%d', now - ONIDX_GRACE),
                          'LIMIT', 0, ONIDX_SWEEP)
  for _, name in ipairs(gone) do
    redis.call('ZREM', onidx, name)
    online_index(name, false)
  end
end
return #ARGV - 4
