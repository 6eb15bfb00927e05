-- room_erase.lua: erase one sender's envelopes from a room's log, and/or
-- re-chain the log under chain v2; one batch per call.
--
-- KEYS[1]  log stream      R..'log'      R = e.g. "ioa:{room:<comm_id>}:"
-- KEYS[2]  copy stream     R..'log:rw'   the rewrite in progress
-- KEYS[3]  chain head      R..'chain'
-- ARGV[1]  sender          whose envelopes to erase; "" erases nothing
--                          (a migration only: ioa-worker migrate-chain)
-- ARGV[2]  at              the erasure's time in ms, for the marker
-- ARGV[3]  actor           who erases (the token's sub, or "-")
-- ARGV[4]  cursor          "" to start, else the last id already copied
-- ARGV[5]  old state       "" nothing seen yet, "-" only unchained entries,
--                          else "<id> <h>" of the last chained entry as
--                          the log had it (its link is verified)
-- ARGV[6]  new state       the same for the copy ("<id> <h>" as rewritten)
-- ARGV[7]  count           entries per call, >= 1
--
-- Returns  {status, cursor, old state, new state, erased, rehashed}
--   "more"   call again with this cursor and these states
--   "done"   the copy replaced the log (RENAME) and the head was set to
--            the new state; erased/rehashed count this call's entries
--            (a copy that changed nothing replaces the log all the same:
--            it is byte for byte what it replaces)
--   "same"   the log is empty: nothing was copied
-- Errors   BUSY      another rewrite of this room is in progress (its copy
--                    exists; it expires 60 s after its last batch)
--          LOST      the copy of an earlier batch is gone (it expired
--                    between calls): start again from ""
--          TAMPERED  "TAMPERED <id> <why>": the log does not verify as it
--                    stands (verify.lua's rules and reasons); nothing is
--                    changed, and nothing will be until an operator looks
--          BADARG
--
-- A Stream entry cannot be edited in place, and XADD below the top id is
-- refused, so the log is copied into KEYS[2] with the same ids (XADD with
-- an explicit id into a stream that holds only lower ones), the sender's
-- envelopes replaced on the way, and the copy RENAMEd over the log by the
-- call that copies the last entry.  Ids stay identical: clients resume by
-- id.  Batches, because a log may be long (ioa_room_log_maxlen caps it at
-- 10,000 by default, and 0 keeps everything) and a script blocks Redis
-- while it runs.  Envelopes posted meanwhile go on being appended to the
-- log (post.lua) and are copied by a later batch; the last batch copies
-- the tail and renames in one script, so none is lost.  Entries the log
-- trims meanwhile (MAXLEN ~) may survive in the copy until the next post
-- trims again.  Readers in between read the old log: subscribers are not
-- told, but any reader after "done" gets the markers.
--
-- What is written, per entry (fields in post.lua's order, e first):
--   * an envelope of ARGV[1] that is not yet redacted: e becomes a
--     redaction marker, the envelope's comm_id, sender, type, id and
--     timestamp members kept, "content": "[erased]", and
--     "erased": {"at": ARGV[2], "by": ARGV[3]}; "r" = "<at> <actor>" is
--     added; d (the digest of the original) and h are kept.
--   * chain v1 entries (h, no d; see post.lua) are re-chained under v2: d
--     = sha1hex(e), h recomputed, and so is every later h, since each
--     covers the one before.  A log that starts at the v1 genesis starts
--     at the v2 genesis after; an anchor (the oldest entry of a trimmed
--     log) keeps its h, which was taken as given anyway.  Erasing a v1
--     entry without this would leave nothing its hash could be checked
--     against: erasure and migration are the one pass.
--   * every other entry is copied as it is.
-- Before anything is rewritten each entry's old link is verified: a log
-- that does not verify is refused (TAMPERED), since re-chaining it would
-- launder the tampering into a valid chain.  The old and new heads are
-- returned in the states, for the caller's audit record: an auditor who
-- kept the old head can tie it to the new one.

local sender, at, actor = ARGV[1], ARGV[2], ARGV[3]
local cursor, old, new = ARGV[4], ARGV[5], ARGV[6]
local count = tonumber(ARGV[7])
if not count or count < 1 then
  return redis.error_reply('BADARG count must be a number >= 1')
end

local comm_id = string.match(KEYS[1], '{room:([^}]*)}') or KEYS[1]
local function genesis(v)
  return redis.sha1hex('ioa-room-chain-' .. v .. '\n' .. comm_id)
end

local function after(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  if am ~= bm then return am > bm end
  return as > bs
end

local function is_marker(e)
  if not e or not string.find(e, '"erased"', 1, true) then return false end
  local ok, v = pcall(cjson.decode, e)
  return ok and type(v) == 'table' and type(v.erased) == 'table'
end

-- the marker for envelope e, or nil when e is not the sender's
local KEEP = { 'comm_id', 'sender', 'type', 'id', 'timestamp' }
local function marker(e)
  if sender == '' or not string.find(e, sender, 1, true) then return nil end
  local ok, v = pcall(cjson.decode, e)
  if not ok or type(v) ~= 'table' or v.sender ~= sender then return nil end
  local m = {}
  for _, k in ipairs(KEEP) do m[k] = v[k] end
  m.content = '[erased]'
  m.erased = { at = tonumber(at) or at, by = actor }
  return cjson.encode(m)
end

local function tampered(id, why)
  redis.call('DEL', KEYS[2])
  return redis.error_reply('TAMPERED ' .. id .. ' ' .. why)
end

if cursor == '' then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    return redis.error_reply('BUSY a rewrite of this room is in progress')
  end
elseif redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.error_reply('LOST the copy expired between batches')
end

local start = '-'
if cursor ~= '' then start = '(' .. cursor end
local entries = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', count)
local erased, rehashed = 0, 0

for _, entry in ipairs(entries) do
  local id, f = entry[1], entry[2]
  local e, h, p, d, r
  for i = 1, #f, 2 do
    local k = f[i]
    if k == 'e' then e = f[i + 1] elseif k == 'h' then h = f[i + 1]
    elseif k == 'p' then p = f[i + 1] elseif k == 'd' then d = f[i + 1]
    elseif k == 'r' then r = f[i + 1] end
  end
  if not e then return tampered(id, 'missing envelope') end

  -- 1. the old link, as verify.lua checks it
  local covered, v = e, 'v1'
  if h then
    if d then
      covered, v = d, 'v2'
      if r then
        if not is_marker(e) then return tampered(id, 'bad redaction') end
      elseif redis.sha1hex(e) ~= d then
        return tampered(id, 'hash mismatch: e does not match its digest d')
      end
    elseif r then
      return tampered(id, 'bad redaction')
    end
  end

  local first = old == '' or old == '-'
  local origin                 -- for a first chained entry: how it starts
  if not h then
    if not first then return tampered(id, 'missing hash') end
    old = '-'
  else
    if first then
      if h == redis.sha1hex(genesis(v) .. '\n0-0\n' .. covered) then
        origin = 'genesis'
      elseif old == '' then
        origin = 'anchor'
      else
        return tampered(id, 'bad first link')
      end
    else
      local pid, ph = string.sub(old, 1, -42), string.sub(old, -40)
      if not after(id, pid) then return tampered(id, 'id out of order') end
      if h ~= redis.sha1hex(ph .. '\n' .. pid .. '\n' .. covered) then
        return tampered(id, 'hash mismatch')
      end
    end
    old = id .. ' ' .. h
  end

  -- 2. the new entry
  local ne, nr = e, r
  if not r then
    local m = marker(e)
    if m then
      ne, nr = m, at .. ' ' .. actor
      erased = erased + 1
    end
  end

  local nd, nh = d, h
  if h then
    nd = d or redis.sha1hex(e)
    if origin == 'anchor' then
      nh = h
    elseif origin == 'genesis' then
      nh = redis.sha1hex(genesis('v2') .. '\n0-0\n' .. nd)
    else
      local pid, ph = string.sub(new, 1, -42), string.sub(new, -40)
      nh = redis.sha1hex(ph .. '\n' .. pid .. '\n' .. nd)
    end
    if nh ~= h or not d then rehashed = rehashed + 1 end
    new = id .. ' ' .. nh
  elseif new == '' then
    new = '-'
  end

  local a = { 'XADD', KEYS[2], id, 'e', ne }
  if nh then a[#a + 1] = 'h'; a[#a + 1] = nh end
  if p then a[#a + 1] = 'p'; a[#a + 1] = p end
  if nd then a[#a + 1] = 'd'; a[#a + 1] = nd end
  if nr then a[#a + 1] = 'r'; a[#a + 1] = nr end
  redis.call(unpack(a))
  cursor = id
end

if #entries == count then
  redis.call('PEXPIRE', KEYS[2], 60000)
  return { 'more', cursor, old, new, erased, rehashed }
end

-- The end.  The log must end where its head says (verify.lua's last check),
-- then the copy takes its place, with the log's last id (an XDEL'd top
-- entry leaves it above the last entry: XADD '*' must stay above it).
local head = redis.call('GET', KEYS[3])
local chained = old ~= '' and old ~= '-'
if chained and not head then return tampered(cursor, 'head missing') end
if head and head ~= old then
  return tampered(string.sub(head, 1, -42), 'tail missing')
end

-- An empty log leaves no copy: nothing to do.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return { 'same', cursor, old, new, erased, rehashed }
end

local info = redis.call('XINFO', 'STREAM', KEYS[1])
for i = 1, #info, 2 do
  if info[i] == 'last-generated-id' then
    redis.call('XSETID', KEYS[2], info[i + 1])
  end
end
-- RENAME carries the copy's expiry over: give the log back its own
local ttl = redis.call('PTTL', KEYS[1])
redis.call('RENAME', KEYS[2], KEYS[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
else
  redis.call('PERSIST', KEYS[1])
end
if chained then
  redis.call('SET', KEYS[3], new)
end
return { 'done', cursor, old, new, erased, rehashed }
