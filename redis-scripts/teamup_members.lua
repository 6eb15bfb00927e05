-- teamup_members.lua: the registry half of a teamup. Checks every member is
-- registered and records the room in each member's room set.
--
-- KEYS[1]  agents zset     B..'agents'  (name -> created ms)
-- ARGV[1]  B               key base with the registry hash tag, e.g. "ioa:{reg}:"
-- ARGV[2]  comm_id         the new room's id
-- ARGV[3]  max             rooms an agent may be in (ioa_max_agent_rooms);
--                          "0": no limit (the goal workers' own teams)
-- ARGV[4..] names          the members (sender included by the caller)
--
-- Returns  the number of distinct members (integer)
-- Errors   UNKNOWN_AGENT <names, comma-separated> are not registered
--          TOOMANYROOMS <names, comma-separated> are in max rooms already
--                  (either way nothing is changed)
--          BADARG  keys not derived from B, empty comm_id, no member
--
-- Room sets are B..'rooms:'..name, derived here; they share the {reg} hash
-- tag with KEYS[1]. The room's own keys live in another slot and are written
-- by room_create.lua. IoA silently drops unregistered names; we refuse the
-- whole teamup instead, so a caller never gets a smaller team than it asked for.
--
-- Why one script: the check and the writes must see the same registry, and a
-- refused teamup must leave no room id behind in anyone's set.

local B, comm_id = ARGV[1], ARGV[2]
if KEYS[1] ~= B .. 'agents' then
  return redis.error_reply('BADARG keys do not match the key base')
end
if comm_id == nil or comm_id == '' then
  return redis.error_reply('BADARG comm_id is empty')
end
local max = tonumber(ARGV[3])
if not max or max < 0 then
  return redis.error_reply('BADARG max must be a number >= 0')
end
if #ARGV < 4 then
  return redis.error_reply('BADARG no member given')
end

local members, seen, unknown = {}, {}, {}
for i = 4, #ARGV do
  local name = ARGV[i]
  if not seen[name] then
    seen[name] = true
    if redis.call('ZSCORE', KEYS[1], name) == false then
      unknown[#unknown + 1] = name
    else
      members[#members + 1] = name
    end
  end
end

if #unknown > 0 then
  return redis.error_reply('UNKNOWN_AGENT ' .. table.concat(unknown, ', ')
                           .. (#unknown == 1 and ' is' or ' are')
                           .. ' not registered')
end

-- Every member's room set is what its connections load and subscribe to:
-- an agent in tens of thousands of rooms makes every connect a storm of
-- Redis commands, and anyone could put a victim there.
if max > 0 then
  local full = {}
  for _, name in ipairs(members) do
    if redis.call('SCARD', B .. 'rooms:' .. name) >= max then
      full[#full + 1] = name
    end
  end
  if #full > 0 then
    return redis.error_reply('TOOMANYROOMS ' .. table.concat(full, ', ')
                             .. (#full == 1 and ' is' or ' are')
                             .. ' in ' .. max .. ' rooms already')
  end
end

for _, name in ipairs(members) do
  redis.call('SADD', B .. 'rooms:' .. name, comm_id)
end
return #members
