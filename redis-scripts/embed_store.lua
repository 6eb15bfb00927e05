-- embed_store.lua: keep the embeddings of agents registered while the
-- embedder was away (ngx_ioa_registry.c embeds them later, on a discovery
-- request that needs them).
--
-- KEYS[1]  agents zset     B..'agents'
-- ARGV[1]  B               key base with the registry hash tag, "ioa:{reg}:"
-- ARGV[2]  vec_model       the model the vectors come from
-- ARGV[3..] name, desc, vec  one triple per agent: vec is desc's embedding,
--                          float32 little-endian, length 1
--
-- Returns  the number of vectors stored.  A vector is stored only if the
--          agent still has that desc (it may have registered again since
--          the text was read); each stored one tells the hubs' discovery
--          indexes to read the agent again.
-- Errors   BADARG  keys not derived from B, triples incomplete, a vector
--                  whose length is not a multiple of 4

local B, model = ARGV[1], ARGV[2]
if KEYS[1] ~= B .. 'agents' then
  return redis.error_reply('BADARG KEYS[1] must be B..agents')
end
if (#ARGV - 2) % 3 ~= 0 or model == nil or model == '' then
  return redis.error_reply('BADARG give a model and name, desc, vec triples')
end

local stored = 0
for i = 3, #ARGV, 3 do
  local name, desc, vec = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if #vec == 0 or #vec % 4 ~= 0 then
    return redis.error_reply('BADARG a vector is float32: 4 bytes a number')
  end
  local key = B .. 'agent:' .. name
  if redis.call('HGET', key, 'desc') == desc then
    redis.call('HSET', key, 'vec', vec, 'vec_model', model, 'vec_dim', #vec / 4)
    redis.call('SPUBLISH', B .. 'index', 'c' .. name)
    stored = stored + 1
  end
end
return stored
