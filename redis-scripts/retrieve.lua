-- retrieve.lua: discovery, i.e. rank agents against capability queries (BM25).
--
-- KEYS[1]  stats hash      B..'stats'   (n, total_len)
-- KEYS[2]  online zset     B..'online'  (name -> expiry ms)
-- ARGV[1]  B               key base with the registry hash tag, e.g. "ioa:{reg}:"
-- ARGV[2]  now_ms          an agent is online iff its online score > now_ms
-- ARGV[3]  limit           top results kept per query, >= 1
-- ARGV[4]  online_only     "1" keep only online agents, "0" keep all
-- ARGV[5]  exclude         a name never returned (the sender), "" for none
-- ARGV[6..] queries        one or more query strings
--
-- Returns  a flat array of 7-tuples, one per agent:
--            name, type, desc, tags_json, score ("%.4f"), online "1"|"0", protocol
--          Each query keeps its own top `limit` (score desc, then name asc),
--          after the online/exclude filters; the lists are concatenated in
--          query order and a name seen before is dropped (first one wins), as
--          IoA searches each capability on its own and deduplicates.
-- Errors   BADARG  keys not derived from B, limit not >= 1, no query given
--
-- BM25: k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5)) with
-- N = stats.n, df = number of agents in the term's posting hash, document
-- length from the agent hash's `len`, avgdl = total_len / n. A query term
-- repeated in one query counts once. Postings and agent hashes are derived
-- from B and share the {reg} hash tag with the declared keys.
--
-- Why one script: idf needs N and df and the document lengths from the same
-- instant; fetching them round trip by round trip from nginx would cost one
-- network hop per term and per candidate.

-- BEGIN tokenizer (identical in register.lua and retrieve.lua)
local STOP = {}
for w in ([[the a an and or of to in on for with is are be by at as it its
  that this these those from can could i you me my your we our us he she they
  them their his her was were been has have had do does not no but if so than
  then there what which who how will would should may into about all any]]):gmatch('%S+') do
  STOP[w] = true
end

-- Lowercase ASCII, split on anything that is not a-z, 0-9 or a byte >= 128
-- (so UTF-8 words survive whole), drop 1-byte tokens and stopwords, fold
-- plurals ("queries" -> "query", "apis" -> "api") so either form matches.
-- Appends the tokens of text to out and returns out.
local function tokenize(text, out)
  for w in string.lower(text):gmatch('[a-z0-9\128-\255]+') do
    if #w > 1 and not STOP[w] then
      if #w > 4 and w:sub(-3) == 'ies' then
        w = w:sub(1, -4) .. 'y'
      elseif #w > 3 and w:sub(-1) == 's' and w:sub(-2) ~= 'ss' then
        w = w:sub(1, -2)
      end
      out[#out + 1] = w
    end
  end
  return out
end
-- END tokenizer

local K1, BB = 1.2, 0.75
-- A query is a capability phrase; more distinct terms than this is noise and
-- would only make one call walk more posting lists.
local MAX_TERMS = 32

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

-- Per-call caches: an agent met by several terms or queries is read once.
local doclen, online = {}, {}

local function is_online(name)
  local o = online[name]
  if o == nil then
    local s = redis.call('ZSCORE', KEYS[2], name)
    o = s ~= false and tonumber(s) > now
    online[name] = o
  end
  return o
end

local function rank(query)
  local seen, terms = {}, {}
  for _, t in ipairs(tokenize(query, {})) do
    if not seen[t] and #terms < MAX_TERMS then
      seen[t] = true
      terms[#terms + 1] = t
    end
  end

  local score, names = {}, {}
  for _, t in ipairs(terms) do
    local post = redis.call('HGETALL', B .. 'postings:' .. t)
    local df = #post / 2
    if df > 0 then
      local idf = math.log(1 + (N - df + 0.5) / (df + 0.5))
      for i = 1, #post, 2 do
        local name, f = post[i], tonumber(post[i + 1])
        local dl = doclen[name]
        if dl == nil then
          dl = tonumber(redis.call('HGET', B .. 'agent:' .. name, 'len')) or false
          doclen[name] = dl
        end
        -- A posting without an agent hash would be a bug elsewhere; skip it
        -- rather than fail discovery.
        if dl and name ~= exclude then
          local s = idf * f * (K1 + 1) / (f + K1 * (1 - BB + BB * dl / avgdl))
          if score[name] then
            score[name] = score[name] + s
          else
            score[name] = s
            names[#names + 1] = name
          end
        end
      end
    end
  end

  table.sort(names, function(a, b)
    if score[a] ~= score[b] then return score[a] > score[b] end
    return a < b
  end)

  -- Filter before cutting so `limit` counts agents the caller can use.
  local top = {}
  for _, name in ipairs(names) do
    if #top >= limit then break end
    if score[name] > 0 and (not online_only or is_online(name)) then
      top[#top + 1] = name
    end
  end
  return top, score
end

local out, emitted = {}, {}
for q = 6, #ARGV do
  local top, score = rank(ARGV[q])
  for _, name in ipairs(top) do
    if not emitted[name] then
      emitted[name] = true
      local a = redis.call('HMGET', B .. 'agent:' .. name,
                           'type', 'desc', 'tags', 'protocol')
      out[#out + 1] = name
      out[#out + 1] = a[1] or ''
      out[#out + 1] = a[2] or ''
      out[#out + 1] = a[3] or '[]'
      out[#out + 1] = string.format('%.4f', score[name])
      out[#out + 1] = is_online(name) and '1' or '0'
      out[#out + 1] = a[4] or '0'
    end
  end
end
return out
