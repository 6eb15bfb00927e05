-- goal_spawn.lua: create a sub-goal's record, unless it exists already.
--
-- KEYS[1]  the sub-goal's meta hash   P..'{goal:<child>}:meta'
-- ARGV[1..] field, value pairs, as POST /launch_goal writes them (goal_id,
--          goal, request, state "queued", created_at, parent, depth)
--
-- Returns  1 created, 0 it existed (nothing changed)
--
-- Why a script: a worker that takes over a parent goal half-way repeats
-- the spawn, and must neither overwrite a sub-goal that is already running
-- nor leave a half-written record behind (a record without "state" reads
-- as no goal at all).

if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
