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
-- Returns  {status, cursor, state, checked, unchained, note}
--   "more"    call again with this cursor and state
--   "ok"      the end of the log is reached and it matches the chain head
--   "empty"   no log and no chain head
--   "broken"  cursor is the first entry whose link fails, note says why:
--             "hash mismatch", "missing hash" (an entry without "h" after
--             the chain started), "missing envelope", "id out of order",
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
--
-- Why batches: a script blocks Redis while it runs, so one call checks at
-- most count entries and the caller (ioa-worker verify-room) loops.  The
-- last call reads the tail and the head in one script, so entries appended
-- meanwhile never make a consistent log look truncated.
--
-- The link rule, as post.lua writes it:
--   h(n) = sha1hex(h(n-1) .. "\n" .. id(n-1) .. "\n" .. e(n))
--   h(0) = sha1hex("ioa-room-chain-v1\n" .. comm_id), id(0) = "0-0"

local cursor, state, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not count or count < 1 then
  return redis.error_reply('BADARG count must be a number >= 1')
end

local function genesis()
  return redis.sha1hex('ioa-room-chain-v1\n' ..
    (string.match(KEYS[1], '{room:([^}]*)}') or KEYS[1]))
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

local checked, unchained, note = 0, 0, ''
local function broken(id, why)
  return { 'broken', id, state, checked, unchained, why, note }
end

for _, entry in ipairs(entries) do
  local id, f, e, h = entry[1], entry[2], nil, nil
  for i = 1, #f, 2 do
    if f[i] == 'e' then e = f[i + 1] elseif f[i] == 'h' then h = f[i + 1] end
  end

  if state == '' or state == '-' then
    if not h then
      unchained = unchained + 1
      state = '-'
    else
      if e and h == redis.sha1hex(genesis() .. '\n0-0\n' .. e) then
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
    if not e then return broken(id, 'missing envelope') end
    if not after(id, prev_id) then return broken(id, 'id out of order') end
    if h ~= redis.sha1hex(prev_h .. '\n' .. prev_id .. '\n' .. e) then
      return broken(id, 'hash mismatch')
    end
    checked = checked + 1
    state = id .. ' ' .. h
  end
  cursor = id
end

if #entries == count then
  return { 'more', cursor, state, checked, unchained, note }
end

-- The end: the last chained entry must be the one the head names.
local head = redis.call('GET', KEYS[2])
local chained = state ~= '' and state ~= '-'
if not head then
  if chained then
    return broken(cursor, 'head missing')
  end
  if state == '' then
    return { 'empty', cursor, state, checked, unchained, note }
  end
elseif head ~= state then
  return broken(string.sub(head, 1, -42), 'tail missing')
end
return { 'ok', cursor, state, checked, unchained, note }
