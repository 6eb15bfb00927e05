-- goal_feed_erase.lua: erase one sender's envelopes from a goal's event
-- feed, and its words where the feed quotes them; one batch per call.
--
-- KEYS[1]  feed stream     G..'log'      G = P..'{room:goal-<goal_id>}:'
-- KEYS[2]  copy stream     G..'log:rw'   the rewrite in progress
-- KEYS[3]  quoted texts    G..'log:rwq'  what the sender said, looked for
--                          in the events after it while the rewrite runs
-- ARGV[1]  sender          whose envelopes to erase (not "")
-- ARGV[2]  at              the erasure's time in ms, for the markers
-- ARGV[3]  actor           who erases (the token's sub, or "-")
-- ARGV[4]  cursor          "" to start, else the last id already copied
-- ARGV[5]  count           entries per call, >= 1
-- ARGV[6]  mode            "erase" (the sender's envelopes and its
--                          quotes) or "quotes" (only quotes of the texts
--                          given), as room_erase.lua's
-- ARGV[7..] texts          on the first call (cursor ""): what the sender
--                          said that the feed may quote without holding
--                          it (its results in the goal's record, a
--                          sub-goal's)
--
-- Returns  {status, cursor, erased, quoted}
--   "more"   call again with this cursor
--   "done"   the copy replaced the feed; erased and quoted count this
--            call's entries
--   "same"   the feed is empty (the goal's record expired, or no room yet)
-- Errors   BUSY      another rewrite of this feed is in progress (its copy
--                    expires 60 s after its last batch)
--          LOST      the copy of an earlier batch is gone: start again
--          BADARG
--
-- The feed (workers/worker/events.c) is shaped like a room's log but not
-- chained, so this is room_erase.lua's copy with the same ids and RENAME,
-- without the links: the worker's events appended meanwhile are copied by
-- a later batch, and the last batch copies the tail and renames in one
-- script.  Per entry:
--   * an "envelope" event of the sender's envelope, not yet a marker: the
--     event is written again in events.c's order ("sender" first: the
--     hub's echo check reads it there) with the room's marker as its
--     envelope: {"id", "comm_id", "sender", "type", "timestamp",
--     "content": "[erased]", "erased": {"at", "by"}}; what it said is kept
--     in KEYS[3] for the events after it.
--   * a "person" event of the sender's message (its decision, person.c),
--     not yet erased: written again in events.c's order with its
--     "message", "text" and "reason" "[erased]" (the model's text and
--     reason may be its words again) and "erased": {"at", "by"}; its
--     message and text are kept in KEYS[3] for the events after it.
--   * a "state", "input" or another's "person" event (the conclusion, a
--     question), or an
--     envelope event of the coordinator's (its envelope has "ioa_goal"):
--     each string value redacted (the redact block), the other bytes kept,
--     and "erased": {"at", "by", "quoting"} added, unless there is one
--     (inside the envelope for an envelope event, as in the room).
--   * every other entry is copied as it is: other members' envelopes are
--     their own words.
-- The mirror hash (goal_event.lua's positions) holds ids only: untouched.

local sender, at, actor = ARGV[1], ARGV[2], ARGV[3]
local cursor, count, mode = ARGV[4], tonumber(ARGV[5]), ARGV[6]
if sender == '' or not count or count < 1
   or (mode ~= 'erase' and mode ~= 'quotes') then
  return redis.error_reply('BADARG a sender, count >= 1, mode "erase" or '
                           .. '"quotes"')
end
local QK = KEYS[3]

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

local texts                     -- KEYS[3] as a list, read when needed
local KEEP = { 'comm_id', 'sender', 'type', 'timestamp' }

local function enc(v)
  if v == nil then return 'null' end
  return cjson.encode(v)
end

-- the sender's envelope event ev (decoded) with the marker in its place
local function marker(ev, env)
  local t = said(env)
  if #t > 0 then
    redis.call('SADD', QK, unpack(t))
    texts = nil
  end
  local m = { '{"sender":', enc(ev.sender), ',"timestamp":', enc(ev.timestamp),
              ',"event":"envelope","goal_id":', enc(ev.goal_id),
              ',"envelope":{"id":', enc(env.id) }
  for _, k in ipairs(KEEP) do
    if env[k] ~= nil then m[#m + 1] = ',"' .. k .. '":' .. enc(env[k]) end
  end
  m[#m + 1] = ',"content":"[erased]","erased":'
  m[#m + 1] = cjson.encode({ at = tonumber(at) or at, by = actor })
  m[#m + 1] = '}}'
  return table.concat(m)
end

-- the sender's "person" event ev (decoded) with its words erased
local function person_marker(ev, d)
  local t = {}
  for _, k in ipairs({ 'message', 'text' }) do
    if type(d[k]) == 'string' and d[k] ~= '' and d[k] ~= ERASED then
      t[#t + 1] = d[k]
    end
  end
  if #t > 0 then
    redis.call('SADD', QK, unpack(t))
    texts = nil
  end
  local text = 'null'
  if type(d.text) == 'string' then text = '"' .. ERASED .. '"' end
  return table.concat({ '{"sender":', enc(ev.sender), ',"timestamp":',
    enc(ev.timestamp), ',"event":"person","goal_id":', enc(ev.goal_id),
    ',"decision":{"decision":', enc(d.decision), ',"by":', enc(d.by),
    ',"sender":', enc(d.sender), ',"message":"', ERASED, '","part":',
    enc(d.part), ',"text":', text, ',"reason":"', ERASED, '"},"erased":',
    cjson.encode({ at = tonumber(at) or at, by = actor }), '}' })
end

-- e with the quotes redacted, or nil when it quotes nothing; inner: the
-- "erased" member goes inside the envelope (e ends with "}}")
local function unquoted(e, has, inner)
  texts = texts or texts_sorted(redis.call('SMEMBERS', QK))
  local w, n = redact_json(e, texts, sender)
  if n == 0 then return nil end
  if not has then
    local cut = inner and -3 or -2
    w = string.sub(w, 1, cut) .. ',"erased":' .. cjson.encode(
      { at = tonumber(at) or at, by = actor, quoting = sender })
      .. (inner and '}}' or '}')
  end
  return w
end

-- the entry's new e, and what changed: "erased", "quoted" or nil
local function rewrite(e)
  if string.byte(e, -1) ~= 125 then return e end
  local ok, ev = pcall(cjson.decode, e)
  if not ok or type(ev) ~= 'table' then return e end
  if ev.event == 'envelope' then
    local env = ev.envelope
    if type(env) ~= 'table' then return e end
    if env.sender == sender then
      if mode == 'erase' and type(env.erased) ~= 'table' then
        return marker(ev, env), 'erased'
      end
      return e
    end
    if type(env.ioa_goal) ~= 'string' then return e end
    -- events.c puts the envelope last; else the mark goes on the event
    local inner = string.sub(e, -2) == '}}'
    local w = unquoted(e, (inner and env.erased or ev.erased) ~= nil, inner)
    if w then return w, 'quoted' end
    return e
  end
  if ev.event == 'person' and type(ev.decision) == 'table'
     and ev.decision.sender == sender then
    if mode == 'erase' and ev.erased == nil then
      return person_marker(ev, ev.decision), 'erased'
    end
    return e
  end
  if ev.event == 'state' or ev.event == 'input' or ev.event == 'person' then
    local w = unquoted(e, ev.erased ~= nil, false)
    if w then return w, 'quoted' end
  end
  return e
end

if cursor == '' then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    return redis.error_reply('BUSY a rewrite of this feed is in progress')
  end
  redis.call('DEL', QK)
  local seeds = {}
  for i = 7, #ARGV do
    if ARGV[i] ~= '' then seeds[#seeds + 1] = ARGV[i] end
  end
  if #seeds > 0 then redis.call('SADD', QK, unpack(seeds)) end
elseif redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.error_reply('LOST the copy expired between batches')
end

local start = '-'
if cursor ~= '' then start = '(' .. cursor end
local entries = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', count)
local erased, quoted = 0, 0

for _, entry in ipairs(entries) do
  local id, f = entry[1], entry[2]
  local a = { 'XADD', KEYS[2], id }
  for i = 1, #f, 2 do
    local v, what = f[i + 1], nil
    if f[i] == 'e' then v, what = rewrite(v) end
    if what == 'erased' then erased = erased + 1
    elseif what == 'quoted' then quoted = quoted + 1 end
    a[#a + 1] = f[i]
    a[#a + 1] = v
  end
  redis.call(unpack(a))
  cursor = id
end

if #entries == count then
  redis.call('PEXPIRE', KEYS[2], 60000)
  redis.call('PEXPIRE', QK, 60000)
  return { 'more', cursor, erased, quoted }
end

redis.call('DEL', QK)
if redis.call('EXISTS', KEYS[2]) == 0 then
  return { 'same', cursor, erased, quoted }
end

local info = redis.call('XINFO', 'STREAM', KEYS[1])
for i = 1, #info, 2 do
  if info[i] == 'last-generated-id' then
    redis.call('XSETID', KEYS[2], info[i + 1])
  end
end
-- the feed expires with the goal's record: RENAME would carry the copy's
-- expiry over instead
local ttl = redis.call('PTTL', KEYS[1])
redis.call('RENAME', KEYS[2], KEYS[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
else
  redis.call('PERSIST', KEYS[1])
end
return { 'done', cursor, erased, quoted }
