-- goal_event.lua: append one event to a goal's feed and publish it, at most
-- once per room envelope, once per state, once per input change and once
-- per person's message.
--
-- KEYS[1]  feed stream   G..'log'     G = P..'{room:goal-<goal_id>}:'
-- KEYS[2]  mirror hash   G..'mirror'  env = last room id copied,
--                                     state = last state appended,
--                                     input = its last change,
--                                     person = the last message decided
-- ARGV[1]  event json    its first member is "sender" (the hub reads it)
-- ARGV[2]  channel       G..'ch'
-- ARGV[3]  kind          "env", "state", "input" or "person"
-- ARGV[4]  key           env: the room Stream id of the envelope copied;
--                        state: the state; input: the question and
--                        whether it is open ("<round>.<k>:1"); person:
--                        the message's Stream id (inbox or room)
-- ARGV[5]  publish       "s": SPUBLISH (Redis Cluster: the feed's channel
--                        is a shard channel, as a room's); else PUBLISH
--
-- Returns  the feed's new id, or false when the event is already there
-- Publishes  id .. ' ' .. json on the channel, exactly as post.lua does for
--            rooms, so the hub follows a goal with its room machinery
--
-- Why the mirror hash: a worker that takes over a goal re-reads the room
-- from the last position its predecessor saved, which may be a little
-- before where that one had got to.  The room is read in Stream order, so
-- "copy only ids above the last one copied" makes the copy exact; the check
-- and the append are one script so that they cannot be separated by a
-- crash.  Both keys share the feed's hash tag.

local function after(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if not am or not bm then
    return true
  end
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  if am ~= bm then
    return am > bm
  end
  return as > bs
end

local kind, key = ARGV[3], ARGV[4]
local last = redis.call('HGET', KEYS[2], kind)

if last then
  if kind == 'env' and not after(key, last) then
    return false
  end
  if kind ~= 'env' and last == key then
    return false
  end
end

local id = redis.call('XADD', KEYS[1], '*', 'e', ARGV[1])
redis.call('HSET', KEYS[2], kind, key)
redis.call(ARGV[5] == 's' and 'SPUBLISH' or 'PUBLISH', ARGV[2],
           id .. ' ' .. ARGV[1])
return id
