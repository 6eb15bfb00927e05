-- worker_list.lua: the goal workers' heartbeats and counters, for /metrics.
--
-- KEYS[1]  B               P..'{workers}:', the workers' key base
-- ARGV[1]  max             workers returned at most (the freshest first)
-- ARGV[2]  stale ms        a worker silent this long is forgotten
--
-- Returns  { now_ms, known, { consumer, { field, value, ... } }, ... }
--          now_ms by this node's clock, the one every heartbeat was
--          written with (ioa-worker's worker_beat.lua), so a heartbeat's
--          age never depends on the clocks of nginx's or the workers'
--          hosts; known: workers in B..'all' (more than max may exist)
--
-- Keys (written by each ioa-worker about once a second):
--   B..'all'         ZSET consumer name scored by its last heartbeat
--   B..'w:'..name    HASH the worker's heartbeat and counters (ioa-worker's
--                    stats.c names the fields)
--
-- A worker gone for stale ms (an hour, as the workers prune too) is dropped
-- here as well, so a fleet that was scaled down is forgotten even when no
-- worker is left to prune it.

local B = KEYS[1]
local max = tonumber(ARGV[1]) or 256
local stale = tonumber(ARGV[2]) or 3600000

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local old = redis.call('ZRANGEBYSCORE', B .. 'all', '-inf', now - stale,
                       'LIMIT', 0, 100)
for _, name in ipairs(old) do
  redis.call('DEL', B .. 'w:' .. name)
  redis.call('ZREM', B .. 'all', name)
end

local out = { now, redis.call('ZCARD', B .. 'all') }
local names = redis.call('ZREVRANGE', B .. 'all', 0, max - 1)
for _, name in ipairs(names) do
  local h = redis.call('HGETALL', B .. 'w:' .. name)
  if #h > 0 then
    out[#out + 1] = { name, h }
  end
end

return out
