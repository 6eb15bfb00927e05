-- fsm_save.lua: write fields of a goal's state machine, only as its owner.
--
-- KEYS[1]  fsm hash      P..'{goal:<id>}:fsm'
-- ARGV[1]  owner         the calling worker (its consumer name)
-- ARGV[2]  take          "1": become the owner (the caller has just been
--                        handed the job); "0": write only if still the owner
-- ARGV[3..] field, value pairs
--
-- Returns  1 written, 0 refused: another worker owns the goal now
--
-- Why: the job lease (job_touch.lua) lives in the {jobs} slot, the goal's
-- state here; a worker that froze past --claim-idle (SIGSTOP, a stalled
-- host) and wakes up must not write its stale view over the state of the
-- worker that took over.  The owner field is the fencing token in this
-- slot: taking over sets it, and every later write by the old worker is
-- refused here, atomically, which tells it to let go.

local cur = redis.call('HGET', KEYS[1], 'owner')
if ARGV[2] ~= '1' and cur and cur ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], unpack(ARGV, 3))
return 1
