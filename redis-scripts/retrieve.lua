-- retrieve.lua: discovery, i.e. rank agents against capability queries (BM25).
--
-- KEYS[1]  stats hash      B..'stats'   (n, total_len)
-- KEYS[2]  online zset     B..'online'  (name -> expiry ms)
-- ARGV[1]  B               key base with the registry hash tag, e.g. "ioa:{reg}:"
-- ARGV[2]  now_ms          an agent is online iff its online score > now_ms
-- ARGV[3]  limit           top results kept per query, >= 1
-- ARGV[4]  online_only     "1" keep only online agents, "0" keep all
-- ARGV[5]  exclude         a name never returned (the sender), "" for none
-- ARGV[6..] queries        one or more queries, each its terms joined by
--                          single spaces (ioa_token_join() over the
--                          capability text; "" when it has none)
--
-- Returns  a flat array of 8-tuples, one per agent:
--            name, type, desc, tags_json, score ("%.4f"), online "1"|"0", protocol,
--            record (JSON {"completed","partial","failed","timed_out"})
--          Each query keeps its own top `limit` (score desc, then name asc in
--          byte order), after the online/exclude filters; the lists are
--          concatenated in query order and a name seen before is dropped
--          (first one wins), as IoA searches each capability on its own and
--          deduplicates.
-- Errors   BADARG  keys not derived from B, limit not >= 1, no query given
--
-- BM25: k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5)) with
-- N = stats.n, df = agents in the term's index, document length len, avgdl =
-- total_len / n; a query term repeated in one query counts once, and only
-- the first MAX_TERMS distinct terms of a query count.  The index
-- (register.lua, presence.lua) is per term a sorted set B..'idx:'..term of
-- agent -> tf * 2^32 + len, a hash B..'tf:'..term with the same entries, and
-- for online agents a copy B..'oidx:'..term; all derived from B, so they
-- share the {reg} hash tag with the declared keys.
--
-- The script does not tokenize: the caller does, with the tokenizer that
-- made the index's terms (lib/ioa_tokenize.c, compiled into the module
-- and the worker), so a query and a description can never disagree on what
-- a term is.
--
-- The answer is exactly the BM25 top of scoring every agent that has a term
-- (the same floating-point numbers, the same ties), without reading whole
-- posting lists.  At one length a higher tf always scores higher and at one
-- tf a shorter agent always does, whatever N, df and avgdl are, so a term's
-- sorted set is a few tf groups, each a cursor that reads agents by length,
-- then name, with a falling share: a threshold algorithm over these cursors.
-- A cursor reads a block (its agents of one length) a step at a time, names
-- only; the other terms are looked up with one HMGET per step, and an agent
-- drops out of the lookups as soon as it cannot reach the last kept score.
--
-- The stop test (settled): an agent no cursor has read yet stands at or
-- after the cursor of each of its groups, so a term gives it at most the
-- share of the largest tf among its cursors standing at or before its
-- length; an agent has one length in every term, so the bound is the highest
-- of the per-length sums, taken at the cursors' lengths.  The walk stops when
-- that is below the last kept score.  Every operation in a share is monotonic
-- in IEEE arithmetic and bounds are summed in the scores' order, so a float
-- bound bounds the float score.  An exact tie can only come from the best
-- shape at exactly that length, whose names the sorted set orders after the
-- cursor's: if those sort after the last kept name, they lose the tie, so
-- thousands of agents of one length are not read to the end (every other
-- shape is checked to fall strictly below).  Until top is full the cursor
-- with the largest share is read; then, at the length where the bound is
-- highest, the term cursor there with the fewest agents left in its group
-- per unit of share (few agents to read for much of the bound), skipping a whole block when even its best shape cannot
-- reach top.  At 100,000 agents a query reads a few hundred agents (a few
-- thousand for several common terms), where the full scan read them all.
--
-- online_only walks the online index (idf stays the whole registry's), so
-- it reads online agents only, however few or many they are; an agent it
-- finds is checked against the online zset (a dead holder's agents stay in
-- the index a while, see presence.lua).
--
-- Why one script: idf needs N and df and the document lengths from the same
-- instant, and the walk needs one view of the index; from nginx it would
-- cost a network round trip per step.

-- K1P1 and OMB are K1 + 1 and 1 - BB, the same doubles the expression of
-- the original script computed inline.
local K1, BB = 1.2, 0.75
local K1P1, OMB = K1 + 1, 1 - BB
-- A query is a capability phrase; more distinct terms than this is noise and
-- would only make one call walk more posting lists.
local MAX_TERMS = 32
-- An index entry is tf * SPLIT + len (register.lua).
local SPLIT = 4294967296
-- Agents a cursor yields per step: the first step is small (a top 3 usually
-- ends within a few agents of a cursor's start), later ones double so that a
-- long walk costs few calls.  A step is one ZRANGE, plus one HMGET per other
-- term for the agents still in the race.
local STEP_FIRST, STEP_MAX = 8, 512

-- BEGIN record (identical in query.lua and retrieve.lua)
-- An agent's task record as JSON: the outcomes the goal workers counted in
-- B..'rep:'..name (workers/worker/lua/rep_record.lua, once per task), and
-- its mean time from assignment to result (null until one is known).
local function record(B, name)
  local r = redis.call('HMGET', B .. 'rep:' .. name, 'completed', 'partial',
                       'failed', 'timed_out', 'latency_ms', 'timed')
  local timed = tonumber(r[6]) or 0
  return string.format('{"completed":%d,"partial":%d,"failed":%d,'
                       .. '"timed_out":%d,"latency_ms":%s}',
                       tonumber(r[1]) or 0, tonumber(r[2]) or 0,
                       tonumber(r[3]) or 0, tonumber(r[4]) or 0,
                       timed > 0 and tostring(math.floor((tonumber(r[5]) or 0) / timed))
                       or 'null')
end
-- END record

local B, now = ARGV[1], tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local online_only, exclude = ARGV[4] == '1', ARGV[5] or ''

if KEYS[1] ~= B .. 'stats' or KEYS[2] ~= B .. 'online' then
  return redis.error_reply('BADARG keys do not match the key base')
end
if not now then
  return redis.error_reply('BADARG now_ms is not a number')
end
if not limit or limit < 1 then
  return redis.error_reply('BADARG limit must be at least 1')
end
if #ARGV < 6 then
  return redis.error_reply('BADARG no query given')
end

local stats = redis.call('HMGET', KEYS[1], 'n', 'total_len')
local N, total = tonumber(stats[1]) or 0, tonumber(stats[2]) or 0
if N <= 0 or total <= 0 then
  return {}
end
local avgdl = total / N
local floor, min, call, unpack = math.floor, math.min, redis.call, unpack

-- A term's share of the score of an agent of length dl: idf * f * (K1 + 1)
-- / (f + K1 * (1 - BB + BB * dl / avgdl)).  Scores and bounds are all this
-- expression in this order of operations (the hot loops write it out with
-- the length part x = K1 * (OMB + BB * dl / avgdl) computed once, which is
-- the same arithmetic), so they are the same floating-point function.
local function lenpart(dl)
  return K1 * (OMB + BB * dl / avgdl)
end

-- Per-call cache: an agent met by several queries is looked up once.
local online = {}

local function is_online(name)
  local o = online[name]
  if o == nil then
    local s = call('ZSCORE', KEYS[2], name)
    o = s ~= false and tonumber(s) > now
    online[name] = o
  end
  return o
end

-- a < b in byte order: the order of the sorted sets' members, which the
-- tie rule relies on (Lua's < on strings is the locale's strcoll, and Redis
-- sets LC_COLLATE from the environment).  Only reached on equal scores.
local function before(a, b)
  if a == b then
    return false
  end
  for i = 1, math.min(#a, #b) do
    local x, y = a:byte(i), b:byte(i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- Keep top sorted (score desc, then name asc) and at most `limit` long.
-- An agent already in top (yielded again by another term's cursor) has the
-- same score, so it is found among the entries not below it.
local function keep(top, name, s)
  local n = #top
  if n == limit then
    local last = top[n]
    if s < last.s or (s == last.s and not before(name, last.name)) then
      return
    end
  end
  for k = 1, n do
    if top[k].name == name then
      return
    end
  end
  if n < limit then
    n = n + 1
  end
  while n > 1 do
    local prev = top[n - 1]
    if s < prev.s or (s == prev.s and before(prev.name, name)) then
      break
    end
    top[n] = prev
    n = n - 1
  end
  top[n] = { name = name, s = s }
end

-- A cursor walks one (term, tf) group, ranks [rank, stop) of the term's
-- sorted set, block by block (a block: the group's agents of one length, by
-- name).  It stands at `rank`, the first agent it has not yielded yet: its
-- name and length dl; bend is where that block ends (read when needed).

-- Stand at rank r, the start of a block.
local function seek(g, r)
  g.rank, g.bend = r, nil
  if r >= g.stop then
    g.live = false
    return
  end
  local e = call('ZRANGE', g.key, r, r, 'WITHSCORES')
  g.name, g.dl = e[1], tonumber(e[2]) % SPLIT
end

local function block_end(g)
  if not g.bend then
    g.bend = call('ZCOUNT', g.key, '-inf',
                  string.format('(%.0f', g.f * SPLIT + g.dl + 1))
  end
  return g.bend
end

-- Yield the next agents of the cursor's block (names only: the block gives
-- their tf and length), at most g.step of them.
local function yield(g)
  local bend = block_end(g)
  local last = g.rank + min(g.step, bend - g.rank)
  local names
  g.step = min(g.step * 2, STEP_MAX)
  if last < bend then
    -- one more: the name the cursor then stands at
    names = call('ZRANGE', g.key, g.rank, last)
    g.name = names[#names]
    names[#names] = nil
    g.rank = last
  else
    names = call('ZRANGE', g.key, g.rank, last - 1)
    seek(g, bend)
  end
  return names
end

-- best[i]: the largest share term i can still give an agent of length d that
-- none of its cursors has yielded: such an agent stands at or after the
-- cursor of its group, so that cursor stands at a length <= d; the largest
-- tf among those gives the largest share (a larger tf gives a larger share
-- at one length, by a relative 1e-13 or more for tf < 2^20: far more than
-- rounding).  top[i] is that cursor; skip leaves one cursor out.
local function best_at(terms, groups, d, skip)
  local top, best, x = {}, {}, lenpart(d)
  for k = 1, #groups do
    local g = groups[k]
    if g.live and g.dl <= d and g ~= skip then
      local t = top[g.ti]
      if not t or g.f > t.f then
        top[g.ti] = g
      end
    end
  end
  for i = 1, #terms do
    local g = top[i]
    best[i] = g and g.idf * g.f * K1P1 / (g.f + x) or 0
  end
  return best, top
end

-- keep() for an agent that passes the filters: not the excluded sender, and
-- online now when online_only (the online index may still list an agent
-- whose holder died).  Checked last, for the few agents that would enter.
local function admit(top, name, s)
  local n = #top
  if n == limit
     and (s < top[n].s or (s == top[n].s and not before(name, top[n].name)))
  then
    return
  end
  if name ~= exclude and (not online_only or is_online(name)) then
    keep(top, name, s)
  end
end

-- Score the agents a cursor of term ti yielded (all of length dl, with tf f
-- in ti) and keep the ones that enter top.  best is best_at(dl).  Once top
-- is full, the other terms are looked up best share first, and an agent
-- drops out as soon as what it has so far plus the best it could still get
-- from the terms not looked up yet is below the last kept score (less a
-- margin of 1e-9: that sum is not added in query order); the survivors'
-- scores are then summed in query order.  Most agents of a long block drop
-- out after one lookup.
local function score_block(terms, top, names, ti, f, dl, best)
  local x = lenpart(dl)
  local own = terms[ti].idf * f * K1P1 / (f + x)
  local cut = #top == limit and top[limit].s * (1 - 1e-9)

  local order, rest = {}, {}
  for i = 1, #terms do
    if i ~= ti then
      order[#order + 1] = i
    end
  end
  if cut then
    table.sort(order, function(a, b) return best[a] > best[b] end)
  end
  local acc = 0
  for k = #order, 1, -1 do
    rest[k] = acc
    acc = acc + best[order[k]]
  end

  -- Agents by their position j in names: part[j] is what j has so far
  -- (own when nil), alive the positions still in the race, seen[i][j] j's
  -- entry in term i, memo[i] the share of each entry value met.  An agent
  -- a term does not have keeps what it had, so whether it stays is decided
  -- once per term for all of them (the usual case, made cheap).
  local part, seen, memo = {}, {}, {}
  local alive, n = nil, #names
  for k = 1, #order do
    local i = order[k]
    local idf, r, args = terms[i].idf, rest[k], names
    if alive then
      args = {}
      for a = 1, n do
        args[a] = names[alive[a]]
      end
    end
    local v = call('HMGET', terms[i].tf, unpack(args))
    local left, nl, si, mi = {}, 0, {}, {}
    -- whether an agent without this term stays, when it has only own so far
    local stays = not cut or own + r >= cut
    for a = 1, n do
      local j, z = alive and alive[a] or a, v[a]
      if not z then
        local p = part[j]
        if (p == nil and stays) or (p and (not cut or p + r >= cut)) then
          nl = nl + 1
          left[nl] = j
        end
      else
        local c = mi[z]
        if not c then
          local fz = floor(tonumber(z) / SPLIT)
          c = idf * fz * K1P1 / (fz + x)
          mi[z] = c
        end
        local p = (part[j] or own) + c
        part[j], si[j] = p, z
        if not cut or p + r >= cut then
          nl = nl + 1
          left[nl] = j
        end
      end
    end
    seen[i], memo[i], alive, n = si, mi, left, nl
    if n == 0 then
      return
    end
  end

  for a = 1, n do
    local j, s = alive and alive[a] or a, 0
    for i = 1, #terms do
      if i == ti then
        s = s + own
      else
        local z = seen[i][j]
        if z then
          s = s + memo[i][z]
        end
      end
    end
    admit(top, names[j], s)
  end
end

-- Whether an agent that no cursor has yielded yet can still enter top,
-- whose last entry is kth (see the header).  Returns nil when none can, or
-- the cursor to read next: at the length where the bound is highest, the
-- term cursor there with the fewest agents per unit of share; and whether the answer used the
-- cursors' names (a tie), not only their lengths.
local function settled(terms, groups, kth)
  local ks, kn, T = kth.s, kth.name, #terms

  -- the live cursors by length (insertion sort: a few dozen at most)
  local live, n = {}, 0
  for k = 1, #groups do
    local g = groups[k]
    if g.live then
      local d, j = g.dl, n
      while j > 0 and live[j].dl > d do
        live[j + 1] = live[j]
        j = j - 1
      end
      live[j + 1] = g
      n = n + 1
    end
  end

  -- Sweep the cursors' lengths upwards: between two of them every share
  -- only falls, so the bound peaks at one of them.  m[i]: term i's cursor
  -- with the largest tf among those at or before d (see best_at).
  local m, bs, worst, pick, tied, k = {}, {}, nil, nil, false, 1
  while k <= n do
    local d = live[k].dl
    repeat
      local g = live[k]
      local b = m[g.ti]
      if not b or g.f > b.f then
        m[g.ti] = g
      end
      k = k + 1
    until k > n or live[k].dl ~= d

    local x, bound = lenpart(d), 0
    for i = 1, T do
      local g = m[i]
      bs[i] = g and g.idf * g.f * K1P1 / (g.f + x) or 0
      bound = bound + bs[i]
    end

    local open = bound > ks
    if bound == ks then
      tied = true
      -- A tie is possible only in the exact best shape at length d, whose
      -- names the cursors standing at d bound from below.
      local lb
      for i = 1, T do
        local g = m[i]
        if g and g.dl == d and (not lb or before(lb, g.name)) then
          lb = g.name
        end
      end
      open = not lb or not before(kn, lb)
      -- Every other shape must fall strictly below: one term in its
      -- second-best group (or absent) at d ...
      for i = 1, T do
        if not open and m[i] then
          local second = best_at(terms, groups, d, m[i])
          local s = 0
          for j = 1, T do
            s = s + (j == i and second[i] or bs[j])
          end
          open = s >= ks
        end
      end
      -- ... or a longer document in the same groups.
      if not open then
        local s, x1 = 0, lenpart(d + 1)
        for i = 1, T do
          local g = m[i]
          if g then
            s = s + g.idf * g.f * K1P1 / (g.f + x1)
          end
        end
        open = s >= ks
      end
    end

    if open and (not worst or bound > worst) then
      -- Read the cursor that buys the most bound for the fewest agents:
      -- the fewest agents left in its group per unit of its share here.
      -- The high-tf groups are small and hold most of the bound, so a few
      -- of their agents lower it more than thousands of a tf = 1 group;
      -- at 100,000 agents this reads 2 to 4 times fewer agents for three
      -- common terms than picking the rarest term did.
      worst, pick = bound, nil
      local cost
      for i = 1, T do
        local g = m[i]
        if g then
          local c = (g.stop - g.rank) / bs[i]
          if not pick or c < cost then
            pick, cost = g, c
          end
        end
      end
    end
  end
  return pick, tied
end

local function rank(query)
  local seen, terms = {}, {}
  for t in query:gmatch('%S+') do
    if not seen[t] and #terms < MAX_TERMS then
      seen[t] = true
      local df = call('ZCARD', B .. 'idx:' .. t)
      -- a term nobody has adds nothing to any score; online_only walks the
      -- online index, idf is the whole registry's
      if df > 0 then
        local key = (online_only and B .. 'oidx:' or B .. 'idx:') .. t
        terms[#terms + 1] = {
          key = key, tf = B .. 'tf:' .. t,
          n = online_only and call('ZCARD', key) or df,
          idf = math.log(1 + (N - df + 0.5) / (df + 0.5)) }
      end
    end
  end
  if #terms == 0 then
    return {}
  end

  -- One cursor per (term, tf): the rank ranges of the term's sorted set.
  local groups = {}
  for i, t in ipairs(terms) do
    local r = 0
    while r < t.n do
      local e = call('ZRANGE', t.key, r, r, 'WITHSCORES')
      local z = tonumber(e[2])
      local f = floor(z / SPLIT)
      local g = { key = t.key, ti = i, idf = t.idf, f = f, rank = r,
                  stop = call('ZCOUNT', t.key, '-inf',
                              string.format('(%.0f', (f + 1) * SPLIT)),
                  name = e[1], dl = z % SPLIT, step = STEP_FIRST,
                  live = true }
      groups[#groups + 1] = g
      r = g.stop
    end
  end

  -- Until top is full, read the cursor with the largest share next (the
  -- likeliest good matches); then the one settled() chooses, skipping the
  -- rest of its block when no agent there can reach top.
  -- settled() depends only on the cursors' lengths and the last kept entry
  -- (unless a tie made it look at names): while the cursor it chose stays
  -- in its block and top's last entry is the same, its answer stands.
  -- An agent with several of the terms may be yielded by several cursors;
  -- it then scores the same again and keep() drops the repeat.
  local top, pick, why = {}, nil, nil
  while true do
    local c
    if #top == limit then
      local kth = top[limit]
      if pick and pick.live and pick.dl == why.dl and kth == why.kth then
        c = pick
      else
        local tied
        c, tied = settled(terms, groups, kth)
        if not c then
          break
        end
        pick, why = c, not tied and { dl = c.dl, kth = kth } or {}
      end
    else
      local cs
      for k = 1, #groups do
        local g = groups[k]
        if g.live then
          local s = g.idf * g.f * K1P1 / (g.f + lenpart(g.dl))
          if not c or s > cs or (s == cs and before(g.name, c.name)) then
            c, cs = g, s
          end
        end
      end
      if not c then
        break
      end
    end

    local best = best_at(terms, groups, c.dl, nil)
    local bound = 0
    for i = 1, #terms do
      if i == c.ti then
        bound = bound + c.idf * c.f * K1P1 / (c.f + lenpart(c.dl))
      else
        bound = bound + best[i]
      end
    end
    if #top == limit and bound < top[limit].s then
      seek(c, block_end(c))
    else
      local f, dl = c.f, c.dl
      local names = yield(c)
      if #names > 0 then
        score_block(terms, top, names, c.ti, f, dl, best)
      end
    end
  end
  return top
end

local out, emitted = {}, {}
for q = 6, #ARGV do
  local top = rank(ARGV[q])
  for k = 1, #top do
    local name = top[k].name
    if not emitted[name] then
      emitted[name] = true
      local a = call('HMGET', B .. 'agent:' .. name,
                     'type', 'desc', 'tags', 'protocol')
      out[#out + 1] = name
      out[#out + 1] = a[1] or ''
      out[#out + 1] = a[2] or ''
      out[#out + 1] = a[3] or '[]'
      out[#out + 1] = string.format('%.4f', top[k].s)
      out[#out + 1] = is_online(name) and '1' or '0'
      out[#out + 1] = a[4] or '0'
      out[#out + 1] = record(B, name)
    end
  end
end
return out
