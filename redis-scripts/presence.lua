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
-- simply stops renewing and its entries run out.  The holders keys share the
-- {reg} tag of KEYS[1], so this stays one slot on a Cluster.

local base, holder = ARGV[1], ARGV[2]
local expiry, now = tonumber(ARGV[3]), tonumber(ARGV[4])
if not expiry or expiry < 0 or not now or holder == '' then
  return redis.error_reply('BADARG expiry_ms and now_ms must be numbers, holder non-empty')
end
if KEYS[1] ~= base .. 'online' then
  return redis.error_reply('BADARG KEYS[1] must be B..online')
end

local day = 86400000
for i = 5, #ARGV do
  local name = ARGV[i]
  local hkey = base .. 'holders:' .. name
  if expiry > 0 then
    redis.call('ZADD', hkey, expiry, holder)
    redis.call('PEXPIRE', hkey, math.max(expiry - now, 0) + day)
    redis.call('ZADD', KEYS[1], 'GT', expiry, name)
  else
    redis.call('ZREM', hkey, holder)
    local top = redis.call('ZREVRANGE', hkey, 0, 0, 'WITHSCORES')
    if top[2] and tonumber(top[2]) > now then
      redis.call('ZADD', KEYS[1], top[2], name)
    else
      redis.call('ZREM', KEYS[1], name)
    end
  end
end

-- entries that expired a day ago read as offline anyway; dropping them keeps
-- the set from growing with every name that ever connected
if expiry > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now - day))
end
return #ARGV - 4
