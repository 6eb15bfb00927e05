-- meta_state.lua: move a goal to a new state, with the fields that go with
-- it, unless the goal has ended or is being cancelled.
--
-- KEYS[1]  meta hash     P..'{goal:<id>}:meta'
-- ARGV[1]  state         forming running concluded failed cancelled
--                        (or cancelling, for a sub-goal of a cancelled goal)
-- ARGV[2..] field, value pairs written with the state (comm_id, conclusion,
--          error, updated_at, tokens, ...)
--
-- Returns  {1, state} written, or {0, current state} refused;
--          {0, ""} when the goal does not exist (nothing is created)
--
-- A final state also removes awaiting_input (decide.c).
--
-- Rules: concluded, failed and cancelled are final.  While "cancelling"
-- (set by nginx's goal_cancel.lua) only a final state may be written, so a
-- worker between two steps cannot flip a cancel back to "running"; it sees
-- the refusal and stops the goal.  One script because nginx writes the same
-- field: a read then a write from here could undo a cancel.

local FINAL = { concluded = true, failed = true, cancelled = true }
local cur = redis.call('HGET', KEYS[1], 'state')

if not cur then
  return { 0, '' }
end
if FINAL[cur] or (cur == 'cancelling' and not FINAL[ARGV[1]]) then
  return { 0, cur }
end

redis.call('HSET', KEYS[1], 'state', ARGV[1], unpack(ARGV, 2))
if FINAL[ARGV[1]] then
  -- an ended goal waits for nobody (decide.c: the person's question)
  redis.call('HDEL', KEYS[1], 'awaiting_input')
end
return { 1, ARGV[1] }
