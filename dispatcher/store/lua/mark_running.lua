-- A node agent started the job's process (for a gang: one rank's; the job runs from its first rank on).
-- KEYS[1] job hash   KEYS[2] changed-jobs set
-- ARGV[1] epoch the agent was given   ARGV[2] now_ms   ARGV[3] pid   ARGV[4] job id
-- returns (store/scripts.py Outcome) 1 DONE started; 0 STALE (epoch moved or job not assigned; a gang's
-- rank may also start while the gang runs or stops: its stop then comes from the agent's check);
-- 2 CANCEL_REQUESTED a cancel was requested first
if tostring(redis.call('HGET', KEYS[1], 'epoch')) ~= ARGV[1] then return 0 end
local state = redis.call('HGET', KEYS[1], 'state')
local gang = (redis.call('HGET', KEYS[1], 'gang') or '') ~= ''
if state ~= 'assigned' and not (gang and (state == 'running' or state == 'preempting')) then return 0 end
if redis.call('HEXISTS', KEYS[1], 'cancel_ms') == 1 then return 2 end
if state == 'assigned' then
  redis.call('HSET', KEYS[1], 'state', 'running', 'started_ms', ARGV[2], 'pid', ARGV[3])
end
redis.call('SADD', KEYS[#KEYS], ARGV[#ARGV])  -- the scheduler rereads it (keys.jobs_changed)
return 1
