-- conn_count.lua: one identity's connections across the fleet
-- (ioa_limit_conn under ioa_limit_scope fleet, ngx_ioa_limit_conn_fleet.c).
--
-- KEYS[1]  <p>{conn:<name>}, a hash: holder -> "<count> <expiry ms>"
-- ARGV[1]  holder          the calling nginx worker (unique per process)
-- ARGV[2]  count           the connections of the name that worker holds
--                          now, counting the one being opened (>= 0)
-- ARGV[3]  ttl ms          the worker's entry holds this long unless it is
--                          written again (its heartbeat rewrites it)
-- ARGV[4]  limit           > 0: refuse if the fleet would hold more than
--                          this; "0": only report (a close, a heartbeat)
--
-- Returns  {1, total} written; {0, total} refused, nothing written: total
--          is what the fleet holds, the caller's new connection not counted
--
-- Why a count per worker, written whole each time, and not one shared
-- counter that each connection increments: a connection is held, not
-- spent, and its end must be counted even when the worker that held it
-- dies.  A worker that dies stops rewriting its entry, and the entry is
-- not counted once its expiry has passed (removed by the next call on the
-- key): the count heals by itself, within one ttl.  And since each worker
-- sends its whole count, not a difference, a lost or repeated write is
-- corrected by the next one; the last write of a worker always wins
-- because one worker's commands reach one key over one connection.
--
-- Redis' own clock decides expiry, so instances whose clocks differ agree.

local holder, count = ARGV[1], tonumber(ARGV[2])
local ttl, limit = tonumber(ARGV[3]), tonumber(ARGV[4])

if holder == nil or holder == '' or not count or count < 0 or not ttl
   or ttl <= 0 or not limit or limit < 0
then
  return redis.error_reply('BADARG holder, count >= 0, ttl > 0, limit >= 0')
end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local others, latest = 0, 0
local all = redis.call('HGETALL', KEYS[1])

for i = 1, #all, 2 do
  local h = all[i]
  local n, until_ms = all[i + 1]:match('^(%d+) (%d+)$')
  n, until_ms = tonumber(n), tonumber(until_ms)
  if not n or until_ms <= now then
    redis.call('HDEL', KEYS[1], h)
  elseif h ~= holder then
    others = others + n
    if until_ms > latest then latest = until_ms end
  end
end

if limit > 0 and count > 0 and others + count > limit then
  return { 0, others + count - 1 }
end

if count == 0 then
  redis.call('HDEL', KEYS[1], holder)
else
  redis.call('HSET', KEYS[1], holder, count .. ' ' .. (now + ttl))
  if now + ttl > latest then latest = now + ttl end
end

-- the key goes with its last live entry
if latest > now then
  redis.call('PEXPIREAT', KEYS[1], latest)
end

return { 1, others + count }
