-- goal_message.lua: a person's message to a running goal (POST
-- /goals/{id}/messages), for the coordinator's next decision.
--
-- KEYS[1]  P{goal:<id>}:meta     the goal's HASH
-- KEYS[2]  P{goal:<id>}:inbox    the goal's messages (a Stream)
-- ARGV[1]  sender          who wrote it (the token's subject, or "user")
-- ARGV[2]  content         the message
-- ARGV[3]  now_ms
-- ARGV[4]  max             messages a goal's inbox holds
-- ARGV[5]  owner           the caller must be the goal's launcher (meta
--                          launched_by); "" or absent: anyone may
-- ARGV[6]  control channel P{goal:<id>}:control: "message" is published
--                          there, so the goal's worker, which waits on it,
--                          reads the inbox at once; absent: not published
-- ARGV[7]  publish         "s": SPUBLISH (Redis Cluster: the channel is in
--                          the goal's slot); else PUBLISH
--
-- Returns  the message's Stream id
-- Errors   NOGOAL      no such goal
--          NOTYOURS    the goal was launched by someone else
--          ENDED <state>  the goal has ended, or is being cancelled
--          FULL        the inbox holds max messages already
--
-- One script so that a message is never accepted into a goal that has
-- ended meanwhile: the state check and the append are atomic.  The inbox
-- is never trimmed (a message the worker has not read would be lost): a
-- full inbox refuses instead.  It expires with the goal's record.

local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  return redis.error_reply('NOGOAL no such goal')
end
if ARGV[5] and ARGV[5] ~= ''
   and redis.call('HGET', KEYS[1], 'launched_by') ~= ARGV[5] then
  return redis.error_reply('NOTYOURS the goal was launched by someone else')
end
if state == 'concluded' or state == 'failed' or state == 'cancelled'
   or state == 'cancelling' then
  return redis.error_reply('ENDED ' .. state)
end
if redis.call('XLEN', KEYS[2]) >= tonumber(ARGV[4]) then
  return redis.error_reply('FULL the goal has ' .. ARGV[4] .. ' messages')
end
local id = redis.call('XADD', KEYS[2], '*', 'sender', ARGV[1],
                      'content', ARGV[2], 'at', ARGV[3])
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
if ARGV[6] and ARGV[6] ~= '' then
  redis.call(ARGV[7] == 's' and 'SPUBLISH' or 'PUBLISH', ARGV[6], 'message')
end
return id
