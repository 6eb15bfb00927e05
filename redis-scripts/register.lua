-- register.lua: upsert one agent into the registry and its BM25 index.
--
-- KEYS[1]  agent hash      B..'agent:'..name
-- KEYS[2]  agents zset     B..'agents'      (name -> created ms)
-- KEYS[3]  stats hash      B..'stats'       (n, total_len)
-- ARGV[1]  B               key base with the registry hash tag, e.g. "ioa:{reg}:"
-- ARGV[2]  name
-- ARGV[3]  type            "Human Assistant" | "Thing Assistant" (checked by the module)
-- ARGV[4]  desc
-- ARGV[5]  tags_json       JSON array of strings, "[]" when none
-- ARGV[6]  protocol        "1" the agent speaks IoA itself, "0" workers speak for it
-- ARGV[7]  now_ms          becomes updated_at (and the agents zset score when new)
-- ARGV[8]  created_at      "%Y-%m-%d-%H-%M-%S"; used only on first registration
-- ARGV[9]  max_agents      a new agent is refused once the registry holds
--                          this many ("0": no cap); updates of registered
--                          agents always pass
-- ARGV[10] terms           the document's terms joined by single spaces: the
--                          terms of desc, then those of each tag in order
--                          (ioa_token_join() over desc and each tag);
--                          "" when there are none
-- ARGV[11] vec_model       the model desc was embedded with (semantic
--                          discovery, ngx_ioa_embed.c); "" or absent: none
-- ARGV[12] vec             desc's embedding: float32 little-endian, length 1
--                          (stored as vec, vec_model, vec_dim).  Without one
--                          a changed desc drops the old vector, and the agent
--                          is embedded later (embed_store.lua)
-- ARGV[13] a2a_url         the agent's A2A card when an A2A agent stands
--                          behind it (ioa-agent --a2a; checked by the
--                          module); "" or absent: none, and a former one goes
--
-- Returns  {"created"|"updated", created_at}  (created_at as first registered)
-- Errors   FULL    "FULL the registry holds <n> agents, the most
--                  ioa_max_agents allows"; nothing is stored
--          BADARG  empty name, KEYS not derived from B and name, tags_json not
--                  an array of strings, protocol not "0"/"1", now_ms or
--                  max_agents not a number, no terms argument, a document of
--                  2^20 tokens or more (the module's 8 KiB desc and 32 tags of
--                  64 bytes give at most about 5,000)
--
-- Document indexed = tokens of desc, then the tokens of each tag once more
-- (tags are words the agent chose to be found by, so they weigh a little more
-- than a passing mention in desc).  The script does not tokenize: the caller
-- does, with the one tokenizer there is (lib/ioa_tokenize.c, which the
-- module and the worker compile), and passes the terms in ARGV[10].
-- Terms are taken as they are, repeats included: a term's count is its tf,
-- the number of terms is the document's length.  desc and tags_json are only
-- stored (and tags_json checked).
--
-- The index: per term, a sorted set B..'idx:'..term (member = agent name,
-- score = tf * 2^32 + len: term frequency in the high part, the document's
-- length in the low part; both are below 2^20, so the score is an exact
-- double) and a hash B..'tf:'..term holding the same number per agent.
-- retrieve.lua reads the sorted set as "tf groups, each ordered by length,
-- then name": within one tf a shorter document always scores higher, whatever
-- avgdl is, which is what lets it stop early (see retrieve.lua); the hash is
-- for looking agents up by name (HMGET returns the stored string, ZMSCORE
-- would format a double per agent, several times slower).  Nothing in the
-- index depends on N, df or avgdl, so a registration touches only the
-- agent's own terms: O(terms * log n), never a re-scoring of other agents.
-- An agent that is online (in B..'onidx', see presence.lua) also has its
-- entries copied into B..'oidx:'..term, the online index.  The keys are
-- derived from B and share the {reg} hash tag with the declared keys, so
-- this stays Cluster-correct.
--
-- Why one script: the old entries must be removed, the new ones added and
-- n / total_len adjusted together, or a concurrent retrieve sees a half-indexed
-- agent and the BM25 statistics drift forever.

local B, name, atype, desc, tags_json, protocol, now_ms, created_at =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local max_agents, doc = tonumber(ARGV[9]), ARGV[10]

if name == nil or name == '' then
  return redis.error_reply('BADARG agent name is empty')
end
if KEYS[1] ~= B .. 'agent:' .. name or KEYS[2] ~= B .. 'agents'
   or KEYS[3] ~= B .. 'stats' then
  return redis.error_reply('BADARG keys do not match the key base and agent name')
end
if protocol ~= '0' and protocol ~= '1' then
  return redis.error_reply('BADARG protocol flag must be 0 or 1')
end
if not tonumber(now_ms) then
  return redis.error_reply('BADARG now_ms is not a number')
end
if not max_agents then
  return redis.error_reply('BADARG max_agents is not a number')
end
if doc == nil then
  return redis.error_reply('BADARG no terms given')
end

-- cjson.decode turns both "[]" and "{}" into an empty table, so check that every
-- key is an array index and every value a string rather than trusting the shape.
local ok, tags = pcall(cjson.decode, tags_json)
if not ok or type(tags) ~= 'table' then
  return redis.error_reply('BADARG tags is not a JSON array')
end
for k, v in pairs(tags) do
  if type(k) ~= 'number' or type(v) ~= 'string' then
    return redis.error_reply('BADARG tags must be an array of strings')
  end
end

-- The new document: term frequencies, distinct terms and length.
local ntoks, tf, terms = 0, {}, {}
for t in doc:gmatch('%S+') do
  ntoks = ntoks + 1
  if tf[t] then
    tf[t] = tf[t] + 1
  else
    tf[t] = 1
    terms[#terms + 1] = t
  end
end
table.sort(terms)
if ntoks >= 1048576 then
  return redis.error_reply('BADARG the document is too long to index')
end

local old = redis.call('HMGET', KEYS[1], 'created_at', 'terms', 'len')
local exists = old[1] ~= false
local old_len = 0

if not exists and max_agents > 0 then
  local n = tonumber(redis.call('HGET', KEYS[3], 'n') or '0') or 0
  if n >= max_agents then
    return redis.error_reply('FULL the registry holds ' .. n ..
      ' agents, the most ioa_max_agents allows')
  end
end

if exists then
  created_at = old[1]
  old_len = tonumber(old[3]) or 0
  -- Remove only the terms the agent no longer has; the others are overwritten
  -- below (their entry carries the length, which may have changed). A key
  -- left empty is deleted by Redis itself.
  for t in (old[2] or ''):gmatch('%S+') do
    if not tf[t] then
      redis.call('ZREM', B .. 'idx:' .. t, name)
      redis.call('HDEL', B .. 'tf:' .. t, name)
      redis.call('ZREM', B .. 'oidx:' .. t, name)
    end
  end
end

-- 2^32: the tf / length split of the index entries (see the header).
local online = redis.call('ZSCORE', B .. 'onidx', name) ~= false
for _, t in ipairs(terms) do
  local v = string.format('%.0f', tf[t] * 4294967296 + ntoks)
  redis.call('ZADD', B .. 'idx:' .. t, v, name)
  redis.call('HSET', B .. 'tf:' .. t, name, v)
  if online then
    redis.call('ZADD', B .. 'oidx:' .. t, v, name)
  end
end

local vec_model, vec = ARGV[11] or '', ARGV[12] or ''
if vec_model ~= '' and #vec > 0 and #vec % 4 == 0 then
  redis.call('HSET', KEYS[1], 'vec', vec, 'vec_model', vec_model,
             'vec_dim', #vec / 4)
elseif exists and redis.call('HGET', KEYS[1], 'desc') ~= desc then
  redis.call('HDEL', KEYS[1], 'vec', 'vec_model', 'vec_dim')
end

local a2a_url = ARGV[13] or ''
if a2a_url ~= '' then
  redis.call('HSET', KEYS[1], 'a2a_url', a2a_url)
elseif exists then
  redis.call('HDEL', KEYS[1], 'a2a_url')
end

redis.call('HSET', KEYS[1],
  'name', name, 'type', atype, 'desc', desc, 'tags', tags_json,
  'created_at', created_at, 'updated_at', now_ms, 'protocol', protocol,
  'terms', table.concat(terms, ' '), 'len', ntoks)

-- NX: the zset score is the first registration time and orders list_agents.
redis.call('ZADD', KEYS[2], 'NX', now_ms, name)
-- registering is being seen (agent_forget.lua: the registry's retention)
redis.call('ZADD', B .. 'seen', 'GT', now_ms, name)

if not exists then
  redis.call('HINCRBY', KEYS[3], 'n', 1)
end
if ntoks ~= old_len then
  redis.call('HINCRBY', KEYS[3], 'total_len', ntoks - old_len)
end

-- every hub's discovery index reads the agent again (ngx_ioa_index_sync.c)
redis.call('SPUBLISH', B .. 'index', 'c' .. name)

return { exists and 'updated' or 'created', created_at }
