-- verify.lua: check one batch of a room's hash chain (see post.lua).
--
-- KEYS[1]  log stream      R..'log'      R = e.g. "ioa:{room:<comm_id>}:"
-- KEYS[2]  chain head      R..'chain'    "<id> <h>" of the last envelope
-- ARGV[1]  cursor          "" from the oldest entry, else the last id
--                          already checked (exclusive)
-- ARGV[2]  state           "" nothing seen yet, "-" only unchained entries
--                          seen, else "<id> <h>" of the last chained entry
-- ARGV[3]  count           entries per call, >= 1
--
-- Returns  {status, cursor, state, checked, unchained, note, start,
--           redacted, legacy}
--   "more"    call again with this cursor and state
--   "ok"      the end of the log is reached and it matches the chain head
--   "empty"   no log and no chain head
--   "broken"  cursor is the first entry whose link fails (tampered), note
--             says why: "hash mismatch" (h does not chain), "hash
--             mismatch: e does not match its digest d" (a v2 entry's
--             envelope was changed and is not a redaction), "bad redaction"
--             (an entry with "r" whose e is not a redaction marker, or a
--             v1 entry with "r": room_erase.lua never writes either),
--             "missing hash" (an entry without "h" after the chain
--             started), "missing envelope", "id out of order",
--             "bad first link" (the first chained entry after unchained
--             ones does not chain to the genesis value), "tail missing"
--             (the log ends before the entry the head names; cursor is the
--             head's id), "head missing" (chained entries but no head)
--   checked    chained entries whose link was checked in this call
--   unchained  entries before the chain start (written before the chain
--              existed) seen in this call
--   note       on the call that finds the chain start: "genesis <id>"
--              (the entry chains to the room's genesis value) or
--              "anchor <id> <h>" (the oldest retained entry of a trimmed
--              room: its predecessor is gone, its hash is taken as given)
--              "broken" puts the reason here and this note seventh
--   start      "" (the seventh element of an answer that is not "broken")
--   redacted   chained entries of this call that are redacted: e is
--              room_erase.lua's marker, "r" says when and by whom, and the
--              digest d they keep still chains (counted in checked too)
--   legacy     chained entries of this call under chain v1 (no "d")
--
-- Why batches: a script blocks Redis while it runs, so one call checks at
-- most count entries and the caller (ioa-worker verify-room) loops.  The
-- last call reads the tail and the head in one script, so entries appended
-- meanwhile never make a consistent log look truncated.
--
-- The link rules, as post.lua writes them.  An entry with "d" is v2:
--   h(n) = sha1hex(h(n-1) .. "\n" .. id(n-1) .. "\n" .. d(n)),
--   d(n) = sha1hex(e(n)) unless the entry is redacted,
--   h(0) = sha1hex("ioa-room-chain-v2\n" .. comm_id), id(0) = "0-0";
-- an entry with "h" and no "d" is v1:
--   h(n) = sha1hex(h(n-1) .. "\n" .. id(n-1) .. "\n" .. e(n)),
--   h(0) = sha1hex("ioa-room-chain-v1\n" .. comm_id).
-- Each entry says which rule it follows, and both may alternate in one log
-- (old and new hubs side by side during an upgrade): a v1 entry after v2
-- ones is not by itself a sign of tampering, since an intruder able to
-- write Redis could recompute either rule anyway.

local cursor, state, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not count or count < 1 then
  return redis.error_reply('BADARG count must be a number >= 1')
end

local function genesis(v)
  return redis.sha1hex('ioa-room-chain-' .. v .. '\n' ..
    (string.match(KEYS[1], '{room:([^}]*)}') or KEYS[1]))
end

-- a redaction marker as room_erase.lua writes it: a JSON object whose
-- "erased" member is an object (when and by whom)
local function is_marker(e)
  if not e or not string.find(e, '"erased"', 1, true) then return false end
  local ok, v = pcall(cjson.decode, e)
  return ok and type(v) == 'table' and type(v.erased) == 'table'
end

local function after(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  if am ~= bm then return am > bm end
  return as > bs
end

local start = '-'
if cursor ~= '' then start = '(' .. cursor end
local entries = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', count)

local checked, unchained, redacted, legacy, note = 0, 0, 0, 0, ''
local function broken(id, why)
  return { 'broken', id, state, checked, unchained, why, note, redacted,
           legacy }
end
local function answer(status)
  return { status, cursor, state, checked, unchained, note, '', redacted,
           legacy }
end

for _, entry in ipairs(entries) do
  local id, f, e, h, d, r = entry[1], entry[2], nil, nil, nil, nil
  for i = 1, #f, 2 do
    local k = f[i]
    if k == 'e' then e = f[i + 1] elseif k == 'h' then h = f[i + 1]
    elseif k == 'd' then d = f[i + 1] elseif k == 'r' then r = f[i + 1] end
  end

  -- what the link covers: the digest (v2) or the envelope itself (v1)
  local covered, v = e, 'v1'
  if h then
    if d then
      covered, v = d, 'v2'
      if r then
        if not is_marker(e) then return broken(id, 'bad redaction') end
        redacted = redacted + 1
      elseif not e then
        return broken(id, 'missing envelope')
      elseif redis.sha1hex(e) ~= d then
        return broken(id, 'hash mismatch: e does not match its digest d')
      end
    else
      if r then return broken(id, 'bad redaction') end
      legacy = legacy + 1
    end
  end

  if state == '' or state == '-' then
    if not h then
      unchained = unchained + 1
      state = '-'
    else
      if covered and h == redis.sha1hex(genesis(v) .. '\n0-0\n' .. covered)
      then
        note = 'genesis ' .. id
      elseif state == '' then
        -- nothing before it: a trimmed room's oldest entry
        note = 'anchor ' .. id .. ' ' .. h
      else
        return broken(id, 'bad first link')
      end
      checked = checked + 1
      state = id .. ' ' .. h
    end
  else
    local prev_id, prev_h = string.sub(state, 1, -42), string.sub(state, -40)
    if not h then return broken(id, 'missing hash') end
    if not covered then return broken(id, 'missing envelope') end
    if not after(id, prev_id) then return broken(id, 'id out of order') end
    if h ~= redis.sha1hex(prev_h .. '\n' .. prev_id .. '\n' .. covered) then
      return broken(id, 'hash mismatch')
    end
    checked = checked + 1
    state = id .. ' ' .. h
  end
  cursor = id
end

if #entries == count then
  return answer('more')
end

-- The end: the last chained entry must be the one the head names.
local head = redis.call('GET', KEYS[2])
local chained = state ~= '' and state ~= '-'
if not head then
  if chained then
    return broken(cursor, 'head missing')
  end
  if state == '' then
    return answer('empty')
  end
elseif head ~= state then
  return broken(string.sub(head, 1, -42), 'tail missing')
end
return answer('ok')
