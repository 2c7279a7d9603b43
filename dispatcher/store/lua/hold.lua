-- Hold a pending job (the scheduler leaves it alone until it is released) or release it, as Slurm's
-- `scontrol hold/release`. Holding moves its epoch on, so a plan made before the hold cannot place it.
-- KEYS[1] job hash   KEYS[2] changed-jobs set
-- ARGV[1] job id     ARGV[2] "hold" or "release"   ARGV[3] who and when ("alice 1700000000000")
-- ARGV[4] the reason a held job shows
-- returns (store/scripts.py Outcome) 1 DONE; 0 STALE already held (hold) or not held (release);
--   -1 NOT_PENDING the job is not pending; -5 NO_JOB no such job
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return -5 end
if state ~= 'pending' then return -1 end
local held = redis.call('HGET', KEYS[1], 'hold')
if ARGV[2] == 'hold' then
  if held and held ~= '' then return 0 end
  local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0') or 0
  redis.call('HSET', KEYS[1], 'hold', ARGV[3], 'reason', ARGV[4], 'epoch', epoch + 1)
else
  if not held or held == '' then return 0 end
  redis.call('HDEL', KEYS[1], 'hold')
  redis.call('HSET', KEYS[1], 'reason', '')
end
redis.call('SADD', KEYS[2], ARGV[1])  -- the scheduler rereads it (keys.jobs_changed)
return 1
