-- Start preempting (or shrinking) a running job; its node agent carries it out.
-- KEYS[1] job hash   KEYS[2] scheduler leader key   KEYS[3] changed-jobs set
-- ARGV[1] epoch the plan saw   ARGV[2] now_ms   ARGV[3] who asked (job id or operator)
-- ARGV[4] mode: graceful | forced | shrink   ARGV[5] why
-- ARGV[6] the leader's fencing value ("" = not checked: an operator's `dispatch preempt`)   ARGV[7] job id
-- returns (store/scripts.py Outcome) 1 DONE marked; 0 STALE not running at that epoch (ended, moved, or
-- already stopping); -4 NOT_LEADER the caller no longer leads
if ARGV[6] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[6] then return -4 end
if tostring(redis.call('HGET', KEYS[1], 'epoch')) ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'state', 'preempting', 'preempting_ms', ARGV[2], 'preempted_by', ARGV[3],
           'preempt_mode', ARGV[4], 'preempt_reason', ARGV[5])
redis.call('SADD', KEYS[#KEYS], ARGV[#ARGV])  -- the scheduler rereads it (keys.jobs_changed)
return 1
