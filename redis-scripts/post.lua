-- post.lua: append one envelope to a room and publish it. The hot path.
--
-- KEYS[1]  members set     R..'members'  R = e.g. "ioa:{room:<comm_id>}:"
-- KEYS[2]  log stream      R..'log'
-- KEYS[3]  floor set       R..'floor'    only read when ARGV[5] is a turn
-- KEYS[4]  meta hash       R..'meta'     only read when ARGV[5] is a turn
-- KEYS[5]  chain head      R..'chain'    optional: derived from KEYS[2]
--                          when absent; declare it on a Cluster, so that
--                          a slot migration answers TRYAGAIN instead of
--                          failing the script on a key that has moved
-- ARGV[1]  sender          the name the connection is authenticated as
-- ARGV[2]  envelope_json   stored as the entry's only field, `e`
-- ARGV[3]  maxlen          "0" unbounded, else XADD MAXLEN ~ maxlen
-- ARGV[4]  channel         pub/sub channel of the room
-- ARGV[5]  type            the envelope's "type" in decimal, "" when it has
--                          none; optional
-- ARGV[6]  publish         "s": SPUBLISH on the channel (Redis Cluster: a
--                          shard channel, in the room's slot, so it
--                          crosses no other node); "sf": SPUBLISH, and a
--                          PUBLISH copy for observers (it reaches every
--                          node); anything else, or absent: PUBLISH
-- ARGV[7..] next_speaker   the envelope's next_speaker names ("" and []
--                          give none; a string is a one-name list)
--
-- The legacy call (2 keys, 4 args) is still valid: the floor is neither
-- checked nor changed, as for any call whose ARGV[5] is absent, "" or not a
-- turn type, and the envelope is PUBLISHed. Callers that take turns (the
-- hub, the coordinator) pass all 4 keys and ARGV[5..]; the keys of one room
-- share its hash slot ({room:..}), and so does its channel, which is what
-- lets the script SPUBLISH on a Cluster.
--
-- Returns  the new stream id, e.g. "1700000000000-0"
-- Publishes  id .. ' ' .. envelope_json  on channel
-- Errors   NOROOM       the room does not exist (no members set)
--          NOTMEMBER    sender is not a member of the room
--          NOTYOURTURN  "NOTYOURTURN <S> does not have the floor; next:
--                       <floor members, sorted, comma-separated>"
--          BADARG       a turn type without KEYS[3] and KEYS[4]
--          (in every case nothing is stored and nothing is published)
--
-- Why one script: the ACL check, the append and the publish must be atomic so
-- that every envelope subscribers see is already in the log, in log order,
-- and a non-member can never slip one in between check and append. The same
-- holds for the floor: two members cannot both take the last turn.
--
-- The hash chain (tamper evidence; verify.lua checks it).  Every entry is
-- {e = envelope, h = hash, p = previous id, d = digest}, e first so that
-- readers taking the envelope by position keep working, with (chain v2)
--   d(n) = sha1hex(e(n))
--   h(n) = sha1hex(h(n-1) .. "\n" .. id(n-1) .. "\n" .. d(n))
--   h(0) = sha1hex("ioa-room-chain-v2\n" .. comm_id), id(0) = "0-0"
-- and R..'chain' = id(n) .. " " .. h(n) after each append.  It is extended
-- here, atomically with the append, so concurrent posters form one line.
--   * The digest, not the envelope, is chained (v2) so that an admin can
--     erase an envelope's content (room_erase.lua replaces e by a marker
--     and adds "r") while d and h still verify: verify.lua then tells
--     "redacted" (r present, e a marker, d chains) from "tampered" (e does
--     not hash to d, or d does not chain).  d is stored in every entry,
--     not only in redacted ones: an entry then says by itself which rule
--     it follows (v1 entries have h but no d), which the verifier needs
--     for the oldest retained entry of a trimmed log (its predecessor is
--     gone) and during a rolling upgrade, when old hubs still append v1
--     entries between v2 ones.
--   * Chain v1 (entries before this change, no "d") chained e itself:
--     h(n) = sha1hex(h(n-1) .. "\n" .. id(n-1) .. "\n" .. e(n)), genesis
--     "ioa-room-chain-v1\n" .. comm_id.  They keep verifying; a new post to
--     such a room chains under v2 to the v1 head.  room_erase.lua re-chains
--     them under v2 before it erases anything (README: "Erasure").
--   * The previous entry's id, not the entry's own: Redis assigns that
--     inside XADD, and computing it here (TIME, the last id, XADD's rule)
--     doubled this script's time.  Each id is still covered, by the next
--     entry's hash and, for the last one, by the head.
--   * The head key rather than the last entry's "h" (XREVRANGE): deleting
--     the last entries then shows (the head names a missing entry, and the
--     next post chains to the deleted one), and a GET is cheaper.
--   * No head: a new room, a room older than the chain, or a lost head;
--     the chain goes on from the last entry if it has "h", else starts
--     from h(0) (a pre-chain room's old entries stay unchained).
--   * SHA-1 because it is what Redis' Lua has (redis.sha1hex, ~1.7 us per
--     300 bytes; SHA-256 in Lua measured ~350 us).  Forging a committed
--     entry needs a second preimage, which SHA-1 still resists; a
--     chosen-prefix collision would need h(n-1) and id(n-1) in advance,
--     which exist only inside this script.  Anyone who can write Redis can
--     recompute the chain: keep its head elsewhere to compare.
--   * Cost: about +4.5 us of Redis time per call (GET, SET, one SHA-1) on
--     6-9 us before (ioa-ceiling --script post): +55%.
--     Chain v2 (d) adds one SHA-1 of the envelope (~0.9 us per 100 bytes
--     hashed, measured in a Lua loop) and a 40-byte field: not
--     measurable against v1 on the shared 2-core machine (median 28.5 vs
--     28.0 us of Redis CPU per call, spread 21-30 vs 26-29; BENCHMARKS.md,
--     "Chain v2").
--   * The previous id is also stored in the entry ("p"): a reader that
--     catches up after id X and gets an entry whose "p" is above X knows
--     that the entries between were trimmed (ioa_room_log_maxlen) before
--     it read them, and says so (ngx_ioa_link.c) instead of a silent gap.
--
-- Floor control. IoA lets each client decide whether an envelope addresses
-- it; the hub enforces it instead. The floor is the set of members whose
-- turn it is. Turn types are DISCUSSION 4, SYNC_TASK_ASSIGNMENT 5,
-- ASYNC_TASK_ASSIGNMENT 6, PAUSE 9, CONCLUDE_GROUP_DISCUSSION 10 and
-- CONCLUSION 11. Every other envelope (task progress 8 and results 7 answer
-- at any time; 0-3; no type at all: plain chat) is never refused by the
-- floor and never changes it.
--   * No floor key: the floor is open, any member may take a turn (IoA's own
--     behaviour, and every room until its first directed turn).
--   * A turn by S is refused when the floor exists, S is not in it and S is
--     not the room's creator. The creator chairs the room (IoA's team
--     leader) and may always speak: that is how a coordinator restarts a
--     stalled room.
--   * After a turn by S with next_speaker L (members only):
--       S the creator:  floor := L          (the chair re-addresses)
--       anyone else:    floor := floor - {S} + L
--     5, 6, 9, 10 also add S: an assigner waits for answers and then speaks
--     again, a pauser is the trigger setter who resumes, a concluder writes
--     the CONCLUSION. An empty result becomes {S} if the room had a floor
--     (IoA: empty next_people becomes [self]) and stays open if it had none.
--   * CONCLUSION 11 deletes the floor: the room is open again and can be
--     continued.

-- '4' -> 1 plain turn, 2 the speaker keeps the floor, 3 ends the conversation
local TURN = { ['4'] = 1, ['5'] = 2, ['6'] = 2, ['9'] = 2, ['10'] = 2,
               ['11'] = 3 }

local sender = ARGV[1]

if redis.call('SISMEMBER', KEYS[1], sender) == 0 then
  -- Only the failure path pays for telling the two errors apart.
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return redis.error_reply('NOROOM no such room')
  end
  return redis.error_reply('NOTMEMBER ' .. sender .. ' is not a member of this room')
end

-- Plain envelopes stop at this table lookup: no floor key is read.
local turn = TURN[ARGV[5]]
local had, chair

if turn then
  if KEYS[3] == nil or KEYS[4] == nil then
    return redis.error_reply('BADARG a turn needs KEYS[3] and KEYS[4]')
  end
  had = redis.call('EXISTS', KEYS[3]) == 1
  chair = redis.call('HGET', KEYS[4], 'creator') == sender
  if had and not chair and redis.call('SISMEMBER', KEYS[3], sender) == 0 then
    local floor = redis.call('SMEMBERS', KEYS[3])
    table.sort(floor)
    return redis.error_reply('NOTYOURTURN ' .. sender ..
      ' does not have the floor; next: ' .. table.concat(floor, ','))
  end
end

-- The chain (see the header).  Without KEYS[5] the head key is derived
-- from KEYS[2] (callers of the 2- and 4-key forms keep working); it shares
-- the room's hash tag, so it is in the script's slot.
local head_key = KEYS[5] or (string.sub(KEYS[2], 1, -4) .. 'chain')
local head = redis.call('GET', head_key)
local prev_id, prev_h
if head then
  -- "<id> <40 hex>": fixed-width tail, so no pattern match on the hot path
  prev_id, prev_h = string.sub(head, 1, -42), string.sub(head, -40)
else
  -- Cold: a new room, a room older than the chain, or a lost head.  Go on
  -- from the last entry if it is chained, else start at the genesis value
  -- (a room's first entry, or the first entry after its unchained ones).
  local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
  if last then
    local f = last[2]
    for i = 1, #f, 2 do
      if f[i] == 'h' then prev_id, prev_h = last[1], f[i + 1] end
    end
  end
  if not prev_h then
    prev_id = '0-0'
    prev_h = redis.sha1hex('ioa-room-chain-v2\n' ..
      (string.match(KEYS[2], '{room:([^}]*)}') or KEYS[2]))
  end
end
local d = redis.sha1hex(ARGV[2])
local h = redis.sha1hex(prev_h .. '\n' .. prev_id .. '\n' .. d)

-- "e" stays the first field: readers that take the envelope by position
-- keep working.
local id
if ARGV[3] ~= '0' then
  -- "~" lets Redis trim whole stream nodes only: much cheaper than exact.
  id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*',
                  'e', ARGV[2], 'h', h, 'p', prev_id, 'd', d)
else
  id = redis.call('XADD', KEYS[2], '*', 'e', ARGV[2], 'h', h, 'p', prev_id,
                  'd', d)
end
redis.call('SET', head_key, id .. ' ' .. h)
local msg = id .. ' ' .. ARGV[2]
local mode = ARGV[6]
if mode == 's' or mode == 'sf' then
  redis.call('SPUBLISH', ARGV[4], msg)
  if mode == 'sf' then
    redis.call('PUBLISH', ARGV[4], msg)
  end
else
  redis.call('PUBLISH', ARGV[4], msg)
end

if turn == 3 then
  redis.call('DEL', KEYS[3])
elseif turn then
  -- An empty set does not exist in Redis, so "open" and "empty" are the
  -- same state and plain SREM/SADD keep the rules above.
  if chair then
    redis.call('DEL', KEYS[3])
  else
    redis.call('SREM', KEYS[3], sender)
  end
  for i = 7, #ARGV do
    -- Names outside the room never get the floor: a typo must not stall it.
    if redis.call('SISMEMBER', KEYS[1], ARGV[i]) == 1 then
      redis.call('SADD', KEYS[3], ARGV[i])
    end
  end
  if turn == 2 or (had and redis.call('EXISTS', KEYS[3]) == 0) then
    redis.call('SADD', KEYS[3], sender)
  end
end

return id
