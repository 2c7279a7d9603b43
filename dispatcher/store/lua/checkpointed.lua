-- A job reports that it saved a checkpoint (dispatch checkpointed, or the CHECKPOINTED file).
-- KEYS[1] job hash   KEYS[2] changed-jobs set
-- ARGV[1] the job's epoch   ARGV[2] when the checkpoint was saved, ms   ARGV[3] job id
-- returns (store/scripts.py Outcome) 1 DONE recorded; 0 STALE epoch moved or job not running
if tostring(redis.call('HGET', KEYS[1], 'epoch')) ~= ARGV[1] then return 0 end
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'running' and state ~= 'preempting' then return 0 end
redis.call('HSET', KEYS[1], 'checkpoint_ms', ARGV[2])
redis.call('SADD', KEYS[#KEYS], ARGV[#ARGV])  -- the scheduler rereads it (keys.jobs_changed)
return 1
