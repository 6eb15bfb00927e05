-- worker_beat.lua: this worker's heartbeat and counters (stats.c).
--
-- KEYS[1]  B               P..'{workers}:', every worker's key base
-- ARGV[1]  consumer        this worker's name in the job group
-- ARGV[2]  started_ms      when this process started: another value in
--                          the hash means an earlier process of the same
--                          name wrote it, and its counters are dropped
--                          first (a restart is a counter reset, never a
--                          mix of two processes' counts)
-- ARGV[3]  stale ms        a worker silent this long is forgotten: this
--                          one's hash expires then, and other workers'
--                          entries that old are removed
-- ARGV[4]  stopped         "1": the process is exiting (its last beat)
-- ARGV[5..] field, value pairs: the counters, absolute values
--
-- Returns  the heartbeat written, in ms by this node's clock
--
-- The heartbeat is taken from Redis' clock, and /metrics
-- (worker_list.lua) compares it with the same clock, so the age of a
-- heartbeat does not depend on the hosts' clocks.  Counters are written
-- whole each time, so a beat that is lost loses nothing but its moment.

local B = KEYS[1]
local me = B .. 'w:' .. ARGV[1]
local stale = tonumber(ARGV[3]) or 3600000

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

if redis.call('HGET', me, 'started_ms') ~= ARGV[2] then
  redis.call('DEL', me)
end

redis.call('HSET', me, 'heartbeat_ms', now, 'started_ms', ARGV[2],
           'stopped', ARGV[4], unpack(ARGV, 5))
redis.call('PEXPIRE', me, stale)
redis.call('ZADD', B .. 'all', now, ARGV[1])

local old = redis.call('ZRANGEBYSCORE', B .. 'all', '-inf', now - stale,
                       'LIMIT', 0, 16)
for _, name in ipairs(old) do
  redis.call('DEL', B .. 'w:' .. name)
  redis.call('ZREM', B .. 'all', name)
end

return now
