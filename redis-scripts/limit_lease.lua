-- limit_lease.lua: a slice of one fleet-wide token bucket (ioa_limit_scope
-- fleet, ngx_ioa_limit.c).  Every nginx instance leases from the same
-- bucket, so the instances together admit what the rate allows.
--
-- KEYS[1]  <p>{lim:<kind>:<name>}, a hash: t (tokens, in thousandths of a
--          request), at (when t was computed, ms of Redis' clock)
-- ARGV[1]  rate, thousandths of a request per second (> 0)
-- ARGV[2]  burst, requests (> 0): what the bucket holds at most
-- ARGV[3]  want, requests (>= 1)
--
-- The bucket refills by the time elapsed at the rate up to the burst, and
-- hands out what it holds of want, whole requests only.  A missing key is
-- a full bucket: the key expires once it would be full again, so an agent
-- or a room that went quiet leaves nothing behind.  Redis' own clock is
-- the only one, so hosts whose clocks differ still share one bucket.
--
-- Answer: {granted, retry_ms}: granted (0 to want) requests; retry_ms, when
-- the bucket is empty, until it holds one whole request again (0 if not).
-- Errors: BADARG.

local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])

if not rate or rate <= 0 or not burst or burst <= 0 or not want
   or want < 1
then
    return redis.error_reply('BADARG rate, burst and want must be above 0')
end

local cap = burst * 1000
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local held = redis.call('HMGET', KEYS[1], 't', 'at')
local t = tonumber(held[1]) or cap
local at = tonumber(held[2]) or now

if now > at then
    t = math.min(cap, t + math.floor((now - at) * rate / 1000))
end

local granted = math.min(want, math.floor(t / 1000))
t = t - granted * 1000

local retry = 0
if t < 1000 then
    retry = math.ceil((1000 - t) * 1000 / rate)
end

redis.call('HSET', KEYS[1], 't', t, 'at', now)
-- full again after (cap - t) / rate seconds: then the key is not needed
redis.call('PEXPIRE', KEYS[1], math.ceil((cap - t) * 1000 / rate) + 1000)

return { granted, retry }
