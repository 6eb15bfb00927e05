-- post.lua: append one envelope to a room and publish it. The hot path.
--
-- KEYS[1]  members set     R..'members'  R = e.g. "ioa:{room:<comm_id>}:"
-- KEYS[2]  log stream      R..'log'
-- ARGV[1]  sender          the name the connection is authenticated as
-- ARGV[2]  envelope_json   stored as the entry's only field, `e`
-- ARGV[3]  maxlen          "0" unbounded, else XADD MAXLEN ~ maxlen
-- ARGV[4]  channel         pub/sub channel of the room
--
-- Returns  the new stream id, e.g. "1700000000000-0"
-- Publishes  id .. ' ' .. envelope_json  on channel
-- Errors   NOROOM     the room does not exist (no members set)
--          NOTMEMBER  sender is not a member of the room
--          (in both cases nothing is stored and nothing is published)
--
-- Why one script: the ACL check, the append and the publish must be atomic so
-- that every envelope subscribers see is already in the log, in log order,
-- and a non-member can never slip one in between check and append.

if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then
  -- Only the failure path pays for telling the two errors apart.
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return redis.error_reply('NOROOM no such room')
  end
  return redis.error_reply('NOTMEMBER ' .. ARGV[1] .. ' is not a member of this room')
end

local id
if ARGV[3] ~= '0' then
  -- "~" lets Redis trim whole stream nodes only: much cheaper than exact.
  id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'e', ARGV[2])
else
  id = redis.call('XADD', KEYS[2], '*', 'e', ARGV[2])
end
redis.call('PUBLISH', ARGV[4], id .. ' ' .. ARGV[2])
return id
