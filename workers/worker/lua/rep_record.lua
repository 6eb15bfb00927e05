-- rep_record.lua: count one task's outcome in its agent's record.
--
-- KEYS[1]  record hash   B..'rep:'..agent   (completed partial failed
--                        timed_out: counts)
-- KEYS[2]  marker        B..'repdone:'..task_id
-- ARGV[1]  outcome       completed | partial | failed | timed_out
-- ARGV[2]  marker ttl    seconds the marker is kept
-- ARGV[3]  latency ms    assignment to result, "0" or absent: unknown
--                        (summed in latency_ms, counted in timed)
-- ARGV[4]  B             the registry's key base, "ioa:{reg}:", and
-- ARGV[5]  agent         the agent's name: the hubs' discovery indexes
--                        read the agent again (ngx_ioa_index_sync.c);
--                        absent: nobody is told
--
-- Returns  1 counted, 0 counted before (the marker exists)
--
-- Both keys carry the registry's hash tag, as the agent's own keys do, so
-- query.lua and retrieve.lua read the record next to the agent.  The
-- marker makes the count exactly once per task: a worker that takes a
-- goal over records the same tasks again, and only the first write
-- counts.  It expires after the ttl, long after any takeover; the record
-- itself is the agent's history and is kept.

local o = ARGV[1]
if o ~= 'completed' and o ~= 'partial' and o ~= 'failed'
   and o ~= 'timed_out' then
  return redis.error_reply('BADARG unknown outcome ' .. tostring(o))
end
if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', tonumber(ARGV[2]) or 604800) then
  return 0
end
redis.call('HINCRBY', KEYS[1], o, 1)
local ms = tonumber(ARGV[3]) or 0
if ms > 0 then
  redis.call('HINCRBY', KEYS[1], 'latency_ms', math.floor(ms))
  redis.call('HINCRBY', KEYS[1], 'timed', 1)
end
if ARGV[4] and ARGV[5] then
  redis.call('SPUBLISH', ARGV[4] .. 'index', 'c' .. ARGV[5])
end
return 1
