-- job_touch.lua: renew (or release) a worker's lease on a goal job.
--
-- KEYS[1]  jobs stream   P..'{jobs}:goals'
-- ARGV[1]  group         "workers"
-- ARGV[2]  consumer      the calling worker
-- ARGV[3]  job id
-- ARGV[4]  idle ms       "0" renews the lease; a large value releases the job
--                        so that any worker's XAUTOCLAIM takes it at once
--
-- Returns  1 the caller held the job (and still does, renewed or released),
--          0 it does not: another worker claimed it, or it was acknowledged
--
-- The lease is the pending entry itself: XAUTOCLAIM hands a job to another
-- worker only after it has been idle for --claim-idle, and XCLAIM with
-- JUSTID resets the idle time without counting a delivery.  Checking the
-- owner and claiming must be one step, or a worker could take back a job
-- that another one has just claimed.

local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then
  return 0
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3],
           'IDLE', ARGV[4], 'JUSTID')
return 1
