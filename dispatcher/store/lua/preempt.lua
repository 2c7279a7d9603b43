-- Start preempting (or shrinking) a running job and send its node agent the command, in one step:
-- the job is marked and the command queued on its node's control stream, or neither.
-- KEYS[1] job hash   KEYS[2] scheduler leader key   KEYS[3] changed-jobs set   KEYS[4] the node's control stream
-- ARGV[1] epoch the plan saw   ARGV[2] now_ms   ARGV[3] who asked (job id or operator)
-- ARGV[4] mode: graceful | forced | shrink   ARGV[5] why
-- ARGV[6] the leader's fencing value ("" = not checked: an operator's `dispatch preempt`, an agent's idle
--   requeue)   ARGV[7] job id
-- ARGV[8] the command's field   ARGV[9] the command, packed (store/control.py)   ARGV[10] the stream's cap
-- returns (store/scripts.py Outcome) 1 DONE marked and sent; 0 STALE not running at that epoch (ended,
-- moved, or already stopping); -4 NOT_LEADER the caller no longer leads. The command is queued before
-- the mark, so a stream of the wrong type fails the call with nothing written.
if ARGV[6] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[6] then return -4 end
if tostring(redis.call('HGET', KEYS[1], 'epoch')) ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[10], '*', ARGV[8], ARGV[9])
redis.call('HSET', KEYS[1], 'state', 'preempting', 'preempting_ms', ARGV[2], 'preempted_by', ARGV[3],
           'preempt_mode', ARGV[4], 'preempt_reason', ARGV[5])
redis.call('SADD', KEYS[3], ARGV[7])  -- the scheduler rereads it (keys.jobs_changed)
return 1
