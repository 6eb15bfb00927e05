-- goal_cancel.lua: ask the workers to stop a goal.
--
-- KEYS[1]  P{goal:<id>}:meta     the goal's HASH
-- ARGV[1]  control channel       P{goal:<id>}:control
-- ARGV[2]  now_ms
-- ARGV[3]  publish         "s": SPUBLISH (Redis Cluster: the channel is in
--                          the goal's slot); else, or absent: PUBLISH
-- ARGV[4]  owner           the caller must be the goal's launcher (meta
--                          launched_by); "" or absent: anyone may (open
--                          mode, an administrator)
--
-- Returns  1 when the goal is now "cancelling", 0 when it had already ended
--          (concluded, failed or cancelled: nothing to stop)
-- Errors   NOGOAL  no such goal
--          NOTYOURS  the goal was launched by someone else
--
-- One script so that a goal that ends while the cancel is on its way is not
-- flipped back to "cancelling": the state check and the write are atomic.
-- The worker that holds the goal hears "cancel" on the control channel (or
-- sees the state between two steps), stops the goal and its sub-goals, and
-- sets "cancelled".

local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  return redis.error_reply('NOGOAL no such goal')
end
if ARGV[4] and ARGV[4] ~= ''
   and redis.call('HGET', KEYS[1], 'launched_by') ~= ARGV[4] then
  return redis.error_reply('NOTYOURS the goal was launched by someone else')
end
if state == 'concluded' or state == 'failed' or state == 'cancelled' then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'cancelling', 'updated_at', ARGV[2])
redis.call(ARGV[3] == 's' and 'SPUBLISH' or 'PUBLISH', ARGV[1], 'cancel')
return 1
