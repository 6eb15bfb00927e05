-- presence.lua: mark agents online until a time, or offline now.
--
-- KEYS[1]  online zset     B..'online'  (name -> expiry ms)
-- ARGV[1]  expiry_ms       > 0: each name is online until this time (ZADD);
--                          "0": the names are offline now (ZREM)
-- ARGV[2..] names          zero or more agent names
--
-- Returns  the number of names given (integer)
-- Errors   BADARG  expiry_ms not a number >= 0
--
-- Each nginx worker calls this as a heartbeat for the agents connected to it,
-- with expiry = now + a few heartbeat periods, so an agent whose worker died
-- goes offline by itself. With a positive expiry it also drops entries that
-- expired more than a day before it: they read as offline anyway, and this
-- keeps the set from growing with every name that ever connected.
-- One script so a worker's whole heartbeat is one round trip.

local expiry = tonumber(ARGV[1])
if not expiry or expiry < 0 then
  return redis.error_reply('BADARG expiry_ms must be a number >= 0')
end

local n = #ARGV - 1
-- Commands in slices: Lua's unpack() has a hard limit of a few thousand values.
local SLICE = 1000
if expiry == 0 then
  for i = 2, #ARGV, SLICE do
    redis.call('ZREM', KEYS[1], unpack(ARGV, i, math.min(i + SLICE - 1, #ARGV)))
  end
  return n
end

local args = {}
for i = 2, #ARGV do
  args[#args + 1] = ARGV[1]
  args[#args + 1] = ARGV[i]
  if #args >= 2 * SLICE or i == #ARGV then
    redis.call('ZADD', KEYS[1], unpack(args))
    args = {}
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', expiry - 86400000))
return n
