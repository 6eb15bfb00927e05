-- goal_erase.lua: a goal's record, for the erasure of one sender's words
-- (POST /rooms/{id}/erase, DELETE /agents/{name}?erase=1).
--
-- KEYS[1]  meta hash       P..'{goal:<id>}:meta'
-- KEYS[2]  fsm hash        P..'{goal:<id>}:fsm'
-- ARGV[1]  sender          whose words (not "")
-- ARGV[2]  at              the erasure's time in ms
-- ARGV[3]  actor           who erases (the token's sub, or "-")
-- ARGV[4]  mode            "erase": the sender's results and messages,
--                          and its words wherever the record quotes them;
--                          "quotes": only the texts given, wherever the
--                          record quotes them (a goal whose sub-goal's room
--                          is erased: the sender's words in this goal's
--                          own room are not what is erased)
-- ARGV[5]  check           "check": nothing is changed, the record says
--                          what it holds; "" does the change
-- ARGV[6..] texts          what the sender said elsewhere (a sub-goal's)
--
-- Returns  check: {state, comm_id, parent, text...}: state "" when the
--          goal has no record (it expired); the texts are what the record
--          holds of the sender's words (below), for the room and feed
--          passes, which may quote them without holding them any more
--          otherwise: {fields changed}
--
-- What the record holds of a sender's words (workers/worker/store.c):
--   * the results of its tasks (fsm tasks: agent; res:<task_id>), which
--     the goal's account quotes in the conclusion ("<agent>: <result>");
--   * its proposals and its requests as a person (fsm proposals,
--     requests: JSON lists with sender and content, a request also with
--     the model's reading of it in text; said: its words in the room not
--     decided yet, person.c), and the message that
--     stopped the goal (fsm stopped_by: "<sender>: <message>" or
--     "<sender> proposed it: <message>");
--   * the LLM's own text in the conclusion, when the LLM planner wrote it
--     from results one of which is the sender's or quotes it: a model's
--     wording of what it was given cannot be told from it, so the whole of
--     that text goes (llm_planner.c puts it before the account, see
--     model_text below).
-- "erase" sets the sender's results and stopped_by's message to "[erased]"
-- (whatever their length), then redacts every text found (the redact
-- block) in the fields that quote members: meta conclusion, error and
-- awaiting_input, fsm conclusion, stopped_by, proposals, requests, said, ask,
-- proposal_answer, discussion, decision:<round> and the other tasks'
-- results (a sub-team's result is a sub-goal's conclusion).  The goal's
-- text, its parts and the tasks' descriptions are the launcher's and the
-- coordinator's, not quoted from members: they stay.  A record that
-- changed gets meta "erased" = "<at> <actor>" (GET /goals/{id} shows it).
--
-- Only an ended goal is changed (the caller checks the state first): a
-- running one holds its results in its worker's memory as well, and would
-- write them again.

local sender, at, actor, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local check = ARGV[5] == 'check'
if sender == '' or (mode ~= 'erase' and mode ~= 'quotes') then
  return redis.error_reply('BADARG a sender, and mode "erase" or "quotes"')
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

local meta = redis.call('HMGET', KEYS[1], 'state', 'comm_id', 'parent',
                        'planner', 'conclusion')
if not meta[1] then
  if check then return { '', '', '' } end
  return { 0 }
end

local fsm = redis.call('HGETALL', KEYS[2])
local f = {}
for i = 1, #fsm, 2 do f[fsm[i]] = fsm[i + 1] end

-- the sender's own: its tasks' ids, and the texts
local own, mine = {}, {}
local ok, tasks = pcall(cjson.decode, f.tasks or '[]')
if ok and type(tasks) == 'table' then
  for _, t in ipairs(tasks) do
    if type(t) == 'table' and t.agent == sender
       and type(t.task_id) == 'string' then
      mine['res:' .. t.task_id] = true
      local r = f['res:' .. t.task_id]
      if r and r ~= '' and r ~= ERASED then own[#own + 1] = r end
    end
  end
end
for _, k in ipairs({ 'proposals', 'requests', 'said' }) do
  local okl, list = pcall(cjson.decode, f[k] or '[]')
  if okl and type(list) == 'table' then
    for _, p in ipairs(list) do
      if type(p) == 'table' and p.sender == sender then
        for _, w in ipairs({ p.content, p.text }) do
          if type(w) == 'string' and w ~= '' and w ~= ERASED then
            own[#own + 1] = w
          end
        end
      end
    end
  end
end
local STOPS = { sender .. ': ', sender .. ' proposed it: ' }
local function stop_of(s)
  for _, p in ipairs(STOPS) do
    if s and string.sub(s, 1, #p) == p then return p, string.sub(s, #p + 1) end
  end
  return nil
end
local sp, said_stop = stop_of(f.stopped_by)
if sp and said_stop ~= '' and said_stop ~= ERASED then
  own[#own + 1] = said_stop
end

-- The LLM's text of a conclusion (decide.c, concluding.c): the model's
-- answer, a blank line, then the account: a line saying why the goal
-- ended, or none, then "Goal: <goal>" and "<n> of <m> part(s) done.".
local function model_text(c)
  if not c then return nil end
  local p, q = nil, 1
  while true do
    local a = string.find(c, 'Goal: ', q, true)
    if not a then break end
    if (a == 1 or string.byte(c, a - 1) == 10)
       and string.find(c, '\n%d+ of %d+ parts? done%.', a) then
      p = a
    end
    q = a + 1
  end
  if not p or p == 1 then return nil end
  local head = string.sub(c, 1, p - 1)
  local l = string.match(head, '\n([^\n]+)\n$')
  if l and (string.find(l, '^Concluded ')
            or string.find(l, '^The goal was cancelled')) then
    head = string.sub(head, 1, #head - #l - 1)
  end
  local m = string.match(head, '^(.-)\n\n$')
  if m and m ~= '' and m ~= ERASED then return m end
  return nil
end

-- the texts: what the sender said here (not for "quotes": its words in
-- this goal's own room are not what is erased), and elsewhere (ARGV)
if mode == 'quotes' then
  own, mine = {}, {}
end
local all = {}
for _, t in ipairs(own) do all[#all + 1] = t end
for i = 6, #ARGV do all[#all + 1] = ARGV[i] end
local texts = texts_sorted(all)

-- the model drew on the sender's words: one of its results is the
-- sender's, or quotes it
local drew = false
if meta[4] == 'llm' then
  for k, v in pairs(f) do
    if string.sub(k, 1, 4) == 'res:' and v ~= '' then
      if mine[k] or select(2, redact(v, texts, sender)) > 0 then
        drew = true
        break
      end
    end
  end
end
local model = drew and (model_text(meta[5]) or model_text(f.conclusion))

if check then
  local out = { meta[1], meta[2] or '', meta[3] or '' }
  for _, t in ipairs(own) do out[#out + 1] = t end
  if model then out[#out + 1] = model end
  return out
end

if model then
  all[#all + 1] = model
  texts = texts_sorted(all)
end

local changed = 0
local mset, fset = {}, {}

-- a JSON field (proposals, a decision) keeps its JSON; a text, even one
-- that starts with "[" (a conclusion whose model text is "[erased]"), is
-- redacted as text
local function walk(v)
  if not v or v == '' then return nil end
  local w, n
  local c = string.sub(v, 1, 1)
  local okj, j = false, nil
  if c == '{' or c == '[' then okj, j = pcall(cjson.decode, v) end
  if okj and type(j) == 'table' then
    w, n = redact_json(v, texts, sender)
  else
    w, n = redact(v, texts, sender)
  end
  if n > 0 then return w end
  return nil
end

if mode == 'erase' then
  for k in pairs(mine) do
    if f[k] and f[k] ~= '' and f[k] ~= ERASED then
      fset[#fset + 1] = k
      fset[#fset + 1] = ERASED
      f[k] = ERASED
    end
  end
  if sp and said_stop ~= ERASED then
    f.stopped_by = sp .. ERASED
    fset[#fset + 1] = 'stopped_by'
    fset[#fset + 1] = f.stopped_by
  end
end

local MQ = { 'conclusion', 'error', 'awaiting_input' }
local FQ = { conclusion = 1, stopped_by = 1, proposals = 1, requests = 1,
             said = 1, ask = 1, proposal_answer = 1, discussion = 1 }
if #texts > 0 then
  local mv = redis.call('HMGET', KEYS[1], unpack(MQ))
  for i, k in ipairs(MQ) do
    local w = walk(mv[i])
    if w then
      mset[#mset + 1] = k
      mset[#mset + 1] = w
    end
  end
  for k, v in pairs(f) do
    if FQ[k] or string.sub(k, 1, 9) == 'decision:'
       or (string.sub(k, 1, 4) == 'res:' and not mine[k]) then
      local w = walk(v)
      if w then
        fset[#fset + 1] = k
        fset[#fset + 1] = w
      end
    end
  end
end

changed = (#mset + #fset) / 2
if changed == 0 then return { 0 } end
-- fsm first: a field set twice (stopped_by) keeps the later value
if #fset > 0 then redis.call('HSET', KEYS[2], unpack(fset)) end
mset[#mset + 1] = 'erased'
mset[#mset + 1] = at .. ' ' .. actor
redis.call('HSET', KEYS[1], unpack(mset))
return { changed }
