-- A rank of the job's current attempt reported progress (its agent saw $DISPATCH_PROGRESS_FILE grow).
-- KEYS[1] job hash   ARGV[1] epoch the agent was given   ARGV[2] when (ms); kept only if later
-- returns (store/scripts.py Outcome) 1 DONE; 0 STALE (epoch moved)
if tostring(redis.call('HGET', KEYS[1], 'epoch')) ~= ARGV[1] then return 0 end
local was = tonumber(redis.call('HGET', KEYS[1], 'progress_ms') or '0') or 0
if tonumber(ARGV[2]) > was then redis.call('HSET', KEYS[1], 'progress_ms', ARGV[2]) end
return 1
