-- room_erase.lua: erase one sender's envelopes from a room's log, and its
-- words where the coordinator's envelopes quote them, and/or re-chain the
-- log under chain v2; one batch per call.
--
-- KEYS[1]  log stream      R..'log'      R = e.g. "ioa:{room:<comm_id>}:"
-- KEYS[2]  copy stream     R..'log:rw'   the rewrite in progress
-- KEYS[3]  chain head      R..'chain'
-- KEYS[4]  quoted texts    R..'log:rwq'  optional: what the sender said,
--                          looked for in the coordinator's envelopes while
--                          the rewrite runs ("Quotes" below); without it
--                          nothing but the sender's envelopes changes
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
-- ARGV[8]  mode            optional: "" or "erase" (the sender's envelopes
--                          and its quotes); "quotes" (only quotes of the
--                          texts given: the sender's envelopes stay, as in
--                          the room of a goal whose sub-goal's room is
--                          erased)
-- ARGV[9..] texts          on the first call (cursor ""): what the sender
--                          said that the room's coordinator envelopes may
--                          quote without the room holding it any more (its
--                          results in the goals' records, a sub-goal's)
--
-- Returns  {status, cursor, old state, new state, erased, rehashed, quoted}
--   "more"   call again with this cursor and these states
--   "done"   the copy replaced the log (RENAME) and the head was set to
--            the new state; erased/rehashed/quoted count this call's
--            entries
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
--   * an envelope of the coordinator (it carries "ioa_goal", which the hub
--     drops from every client's envelope) that quotes the sender: each
--     string value is redacted (the redact block below: its texts become
--     "[erased]"), the other bytes kept; "erased": {"at", "by",
--     "quoting": ARGV[1]} is added, unless it has one, and "r" (d and h
--     kept), so that it verifies as redacted, not as tampered.
--   * every other entry is copied as it is.
--
-- Before anything is rewritten each entry's old link is verified: a log
-- that does not verify is refused (TAMPERED), since re-chaining it would
-- launder the tampering into a valid chain.  The old and new heads are
-- returned in the states, for the caller's audit record: an auditor who
-- kept the old head can tie it to the new one.
--
-- Quotes.  The coordinator quotes a member's results in later steps (the
-- next task of a sequence, the CONCLUSION), so the texts of each of the
-- sender's envelopes erased on the way (content, task_conclusion) are kept
-- in KEYS[4], with ARGV[9..], for the batches after; KEYS[4] expires and
-- goes with the copy.  Other members' envelopes are their own words and
-- stay as they are, quotes or not.

local sender, at, actor = ARGV[1], ARGV[2], ARGV[3]
local cursor, old, new = ARGV[4], ARGV[5], ARGV[6]
local count = tonumber(ARGV[7])
if not count or count < 1 then
  return redis.error_reply('BADARG count must be a number >= 1')
end
local mode = ARGV[8] or ''
if mode ~= '' and mode ~= 'erase' and mode ~= 'quotes' then
  return redis.error_reply('BADARG mode must be "erase" or "quotes"')
end
local QK = sender ~= '' and KEYS[4] or nil

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

-- BEGIN redact (the same in room_erase.lua, goal_feed_erase.lua and
-- goal_erase.lua; t/redis-scripts.t compares them)
--
-- An erased sender's words where the hub's own writers quote them (the
-- coordinator's envelopes, a goal's feed and record) become "[erased]".
-- A text of QUOTE_MIN bytes or more goes wherever it stands; a shorter one
-- only where it is attributed to the sender, as a goal's account writes
-- results ("<sender>: <text>", "<sender> failed (<text>)"): "ok" or "done"
-- alone are also pieces of other words.  Longest first, so that a text
-- inside another leaves nothing behind.
local ERASED, QUOTE_MIN = '[erased]', 8

local function replace_all(s, t, by)
  local a, b = string.find(s, t, 1, true)
  if not a then return s, 0 end
  local out, i, n = {}, 1, 0
  while a do
    out[#out + 1] = string.sub(s, i, a - 1)
    out[#out + 1] = by
    i, n = b + 1, n + 1
    a, b = string.find(s, t, i, true)
  end
  out[#out + 1] = string.sub(s, i)
  return table.concat(out), n
end

-- texts: a list as texts_sorted() makes it
local function redact(s, texts, sender)
  local n, k = 0, 0
  for _, t in ipairs(texts) do
    if #t >= QUOTE_MIN then
      s, k = replace_all(s, t, ERASED)
      n = n + k
    else
      s, k = replace_all(s, sender .. ': ' .. t, sender .. ': ' .. ERASED)
      n = n + k
      s, k = replace_all(s, sender .. ' failed (' .. t .. ')',
                         sender .. ' failed (' .. ERASED .. ')')
      n = n + k
    end
  end
  return s, n
end

-- the same in a JSON text: each string value (not a member's name) is
-- decoded, redacted and, when it changed, encoded again in its place;
-- every other byte stays (the members' order, the other escapes)
local function redact_json(j, texts, sender)
  local out, from, pos, n = {}, 1, 1, 0
  while true do
    local a = string.find(j, '"', pos, true)
    if not a then break end
    local b = a + 1
    while true do
      local q = string.find(j, '["\\]', b)
      if not q then return j, 0 end             -- not JSON: left as it is
      if string.byte(j, q) == 92 then b = q + 2 else b = q; break end
    end
    pos = b + 1
    if not string.find(j, '^%s*:', pos) then
      local ok, v = pcall(cjson.decode, string.sub(j, a, b))
      if ok and type(v) == 'string' then
        local w, k = redact(v, texts, sender)
        if k > 0 then
          out[#out + 1] = string.sub(j, from, a - 1)
          out[#out + 1] = cjson.encode(w)
          from, n = pos, n + k
        end
      end
    end
  end
  if n == 0 then return j, 0 end
  out[#out + 1] = string.sub(j, from)
  return table.concat(out), n
end

-- a list of texts, longest first, without "" and "[erased]"
local function texts_sorted(list)
  local t = {}
  for _, s in ipairs(list) do
    if s ~= '' and s ~= ERASED then t[#t + 1] = s end
  end
  table.sort(t, function(x, y) return #x > #y end)
  return t
end

-- what an envelope (decoded) says: the texts worth looking for
local function said(v)
  local t = {}
  for _, k in ipairs({ 'content', 'task_conclusion' }) do
    if type(v[k]) == 'string' and v[k] ~= '' and v[k] ~= ERASED then
      t[#t + 1] = v[k]
    end
  end
  return t
end
-- END redact

-- KEYS[4] as a list, read when a batch first needs it
local texts

-- the marker for envelope e, or nil when e is not the sender's; what the
-- sender said in it is kept for the quotes
local KEEP = { 'comm_id', 'sender', 'type', 'id', 'timestamp' }
local function marker(e)
  if sender == '' or mode == 'quotes'
     or not string.find(e, sender, 1, true) then
    return nil
  end
  local ok, v = pcall(cjson.decode, e)
  if not ok or type(v) ~= 'table' or v.sender ~= sender then return nil end
  local m = {}
  for _, k in ipairs(KEEP) do m[k] = v[k] end
  m.content = ERASED
  m.erased = { at = tonumber(at) or at, by = actor }
  if QK then
    local t = said(v)
    if #t > 0 then
      redis.call('SADD', QK, unpack(t))
      texts = nil
    end
  end
  return cjson.encode(m)
end

-- a coordinator's envelope e with the sender's words quoted in it
-- redacted, or nil when it quotes none (or is not the coordinator's)
local function unquoted(e)
  if not QK or not string.find(e, '"ioa_goal"', 1, true) then return nil end
  local ok, v = pcall(cjson.decode, e)
  if not ok or type(v) ~= 'table' or type(v.ioa_goal) ~= 'string'
     or v.sender == sender or string.byte(e, -1) ~= 125 then
    return nil
  end
  texts = texts or texts_sorted(redis.call('SMEMBERS', QK))
  local w, n = redact_json(e, texts, sender)
  if n == 0 then return nil end
  if v.erased == nil then
    w = string.sub(w, 1, -2) .. ',"erased":' .. cjson.encode(
      { at = tonumber(at) or at, by = actor, quoting = sender }) .. '}'
  end
  return w
end

local function tampered(id, why)
  redis.call('DEL', KEYS[2])
  if QK then redis.call('DEL', QK) end
  return redis.error_reply('TAMPERED ' .. id .. ' ' .. why)
end

if cursor == '' then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    return redis.error_reply('BUSY a rewrite of this room is in progress')
  end
  if QK then
    redis.call('DEL', QK)
    local seeds = {}
    for i = 9, #ARGV do
      if ARGV[i] ~= '' then seeds[#seeds + 1] = ARGV[i] end
    end
    if #seeds > 0 then redis.call('SADD', QK, unpack(seeds)) end
  end
elseif redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.error_reply('LOST the copy expired between batches')
end

local start = '-'
if cursor ~= '' then start = '(' .. cursor end
local entries = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', count)
local erased, rehashed, quoted = 0, 0, 0

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
  local m = not r and marker(e)
  if m then
    ne, nr = m, at .. ' ' .. actor
    erased = erased + 1
  else
    m = unquoted(e)
    if m then
      ne, nr = m, r or (at .. ' ' .. actor)
      quoted = quoted + 1
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
  if QK then redis.call('PEXPIRE', QK, 60000) end
  return { 'more', cursor, old, new, erased, rehashed, quoted }
end

if QK then redis.call('DEL', QK) end

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
  return { 'same', cursor, old, new, erased, rehashed, quoted }
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
return { 'done', cursor, old, new, erased, rehashed, quoted }
