-- Cancel a job. A pending one ends here; an active one gets cancel_ms (the first cancel's time), and its node
-- agent kills the process and finishes it as cancelled.
-- KEYS[1] job hash   KEYS[2] pending zset   KEYS[3] changed-jobs set   KEYS[4] the notify queue (a pending
--   job that ends here with a --notify is queued for the leading scheduler: no agent runs it)
-- KEYS[5] the ended-jobs index of the state a pending job ends in (id -> finished_ms)
-- KEYS[6] the metrics hash: a pending job's end is counted here, by final state and class (store/counters.py)
-- ARGV[1] job id     ARGV[2] now_ms   ARGV[3] reason
-- ARGV[4] the state a pending job ends in: "cancelled" (absent too), or "failed" (the scheduler failing a
--   job whose dependency failed)
-- returns (store/scripts.py Outcome) 1 DONE cancelled now; 2 CANCEL_REQUESTED from the node; -6 ENDED
--   already final; -5 NO_JOB no such job
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return -5 end
if state == 'pending' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HSET', KEYS[1], 'state', ARGV[4] or 'cancelled', 'finished_ms', ARGV[2], 'reason', ARGV[3])
  if KEYS[5] then redis.call('ZADD', KEYS[5], ARGV[2], ARGV[1]) end
  if KEYS[6] then
    local ok, spec = pcall(cmsgpack.unpack, redis.call('HGET', KEYS[1], 'spec') or '')
    local class = ok and type(spec) == 'table' and type(spec.prio) == 'string' and string.match(spec.prio, '^%a+$')
      or 'unknown'
    redis.call('HINCRBY', KEYS[6], 'jobs_ended|class=' .. class .. ',state=' .. (ARGV[4] or 'cancelled'), 1)
  end
  redis.call('SADD', KEYS[3], ARGV[1])  -- the scheduler rereads it (keys.jobs_changed)
  if KEYS[4] and redis.call('HEXISTS', KEYS[1], 'notify') == 1 then redis.call('RPUSH', KEYS[4], ARGV[1]) end
  return 1
end
if state == 'assigned' or state == 'running' or state == 'preempting' then
  if redis.call('HEXISTS', KEYS[1], 'cancel_ms') == 0 then  -- a second cancel keeps when the first was sent
    redis.call('HSET', KEYS[1], 'cancel_ms', ARGV[2], 'cancel_reason', ARGV[3])  -- (who: for an end it outruns)
  end
  redis.call('SADD', KEYS[3], ARGV[1])  -- the scheduler rereads it (keys.jobs_changed)
  return 2
end
return -6
