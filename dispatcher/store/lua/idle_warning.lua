-- A node agent's idle-GPU warning on a running job (workers/idle.py): set it, or clear it.
-- KEYS[1] job hash   KEYS[2] the idle index (keys.jobs_idle: id -> "<since_ms> <warning>", what the board reads
--   instead of every running job's record)
-- ARGV[1] the epoch the agent runs   ARGV[2] when the idle spell began, ms ("" = clear the warning)
-- ARGV[3] the warning text   ARGV[4] the job's id
-- returns (store/scripts.py Outcome) 1 DONE written; 0 STALE (epoch moved, or the job is not running: an
--   ended attempt keeps no warning)
-- The scheduler does not need it, so the job is not added to the changed set.
if tostring(redis.call('HGET', KEYS[1], 'epoch')) ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
local id = ARGV[4]
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], 'idle_since_ms', 'warning')
  redis.call('HDEL', KEYS[2], id)
else
  redis.call('HSET', KEYS[1], 'idle_since_ms', ARGV[2], 'warning', ARGV[3])
  redis.call('HSET', KEYS[2], id, ARGV[2] .. ' ' .. ARGV[3])
end
return 1
