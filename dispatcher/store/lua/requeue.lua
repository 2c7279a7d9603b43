-- Put an ended job (succeeded, failed or cancelled) back in the queue under its id, as a new attempt, as
-- Slurm's `scontrol requeue`. Its spec, seal and attempts are kept; what belonged to its end (when,
-- exit code, reason, the notify claim) and to its last placement is cleared; the lost-attempt and failure
-- counts start again. attempt + 1 and epoch + 1, as finish.lua's requeue, so a late write about the old
-- attempt is refused. It waits from now (pending index score = now_ms), not from its first submit.
-- KEYS[1] job hash   KEYS[2] pending zset   KEYS[3] changed-jobs set
-- KEYS[4..6] the ended-jobs indexes of succeeded, failed and cancelled jobs
-- ARGV[1] job id   ARGV[2] now_ms   ARGV[3] who and when ("alice 1700000000000")
-- ARGV[4] the reason it shows until the scheduler gives its own ("requeued by alice"; " (it had failed)" is added)
-- returns (store/scripts.py Outcome) 1 DONE; -7 NOT_ENDED the job has not ended; -5 NO_JOB no such job
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return -5 end
if state ~= 'succeeded' and state ~= 'failed' and state ~= 'cancelled' then return -7 end
redis.call('HDEL', KEYS[1], 'finished_ms', 'exit_code', 'verdict', 'notified', 'cancel_ms', 'cancel_reason', 'started_ms',
           'assigned_ms', 'pid', 'preempting_ms', 'gang', 'ranks_left', 'ranks_ended', 'gang_end', 'rendezvous',
           'progress_ms', 'idle_since_ms', 'warning', 'lost', 'failures', 'hold', 'notify_error')
redis.call('HINCRBY', KEYS[1], 'attempt', 1)
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'state', 'pending', 'node', '', 'gpus', '', 'reason', ARGV[4] .. ' (it had ' .. state .. ')',
           'requeued', ARGV[3])
for i = 4, 6 do redis.call('ZREM', KEYS[i], ARGV[1]) end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])  -- the scheduler rereads it (keys.jobs_changed)
return 1
