-- A node agent's idle-GPU warning on a running job (workers/idle.py): set it, or clear it.
-- KEYS[1] job hash
-- ARGV[1] the epoch the agent runs   ARGV[2] when the idle spell began, ms ("" = clear the warning)
-- ARGV[3] the warning text
-- returns (store/scripts.py Outcome) 1 DONE written; 0 STALE (epoch moved, or the job is not running: an
--   ended attempt keeps no warning)
-- The scheduler does not need it, so the job is not added to the changed set.
if tostring(redis.call('HGET', KEYS[1], 'epoch')) ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], 'idle_since_ms', 'warning')
else
  redis.call('HSET', KEYS[1], 'idle_since_ms', ARGV[2], 'warning', ARGV[3])
end
return 1
