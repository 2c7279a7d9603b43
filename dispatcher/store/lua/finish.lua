-- A job ended, or goes back to the queue: free what it held, record the outcome and the attempt.
-- KEYS[1] job hash   KEYS[2] node alloc hash   KEYS[3] active zset   KEYS[4] pending zset
-- KEYS[5] the job's attempts list   KEYS[6] scheduler leader key   KEYS[7] changed-jobs set
-- KEYS[8] the history list of the job's fingerprint   KEYS[9] the history list of its user
-- ARGV[1] job id     ARGV[2] epoch the writer was given   ARGV[3] new state
-- ARGV[4] exit code ("" if none)   ARGV[5] now_ms   ARGV[6] reason
-- ARGV[7] "1" if this requeue is a preemption   ARGV[8] "1" to keep the original submit time for aging
-- ARGV[9] "1" if the job is checkpointable (work lost counts from its last checkpoint)
-- ARGV[10] "" normally; for an attempt lost with its node, the job's retry budget: a lost attempt
--   that had started counts in `lost`, and past the budget the job fails instead of going back
-- ARGV[11] the leader's fencing value when the scheduler requeues a dead node's job ("" = not checked:
--   node agents write their own jobs' outcomes, fenced by the epoch alone)
-- ARGV[12] "" normally; for a job that succeeded, how many runs KEYS[8] keeps (then it records the
--   run in KEYS[8] and KEYS[9]: its run time over all attempts, the user's estimate, the peak GPU memory
--   the agent measured; once, since a job succeeds once)   ARGV[13] how many runs KEYS[9] keeps
-- ARGV[14] the user's estimate in seconds ("" = none)
-- New state 'pending' puts the job back in the queue: attempt + 1, epoch + 1 (fencing any copy
-- still running); a preemption or a lost attempt also counts gpu_s_lost.
-- returns (store/scripts.py Outcome) 1 DONE; 0 STALE write refused (epoch moved or job not active);
-- -4 NOT_LEADER the caller no longer leads
if ARGV[11] ~= '' and redis.call('GET', KEYS[6]) ~= ARGV[11] then return -4 end
if tostring(redis.call('HGET', KEYS[1], 'epoch')) ~= ARGV[2] then return 0 end
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'assigned' and state ~= 'running' and state ~= 'preempting' then return 0 end
local now = tonumber(ARGV[5])
local f = redis.call('HMGET', KEYS[1], 'gpus', 'node', 'attempt', 'assigned_ms', 'started_ms', 'checkpoint_ms')
local gpus = f[1] or ''
local ngpus = 0
for g in string.gmatch(gpus, '[^,]+') do
  ngpus = ngpus + 1
  local held = redis.call('HGET', KEYS[2], g)
  if held == ARGV[1] then
    redis.call('HDEL', KEYS[2], g)
  elseif held and string.sub(held, 1, 1) == '~' then  -- shared: drop this job from the list
    local rest = {}
    for j in string.gmatch(string.sub(held, 2), '[^,]+') do
      if j ~= ARGV[1] then rest[#rest + 1] = j end
    end
    if #rest == 0 then redis.call('HDEL', KEYS[2], g)
    else redis.call('HSET', KEYS[2], g, '~' .. table.concat(rest, ',')) end
  end
end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[1], 'idle_since_ms', 'warning')  -- the idle warning was about this attempt
local new_state, reason = ARGV[3], ARGV[6]
local outcome = new_state
local lost = ARGV[10] ~= '' and state ~= 'assigned'  -- an attempt that never started lost nothing
if new_state == 'pending' then
  outcome = 'requeued'
  if ARGV[7] == '1' then outcome = 'preempted' end
  if ARGV[10] ~= '' then outcome = 'lost' end
end
if ARGV[7] == '1' or lost then
  local since = tonumber(f[5] or ARGV[5]) or now
  if ARGV[9] == '1' then
    local ckpt = tonumber(f[6] or '0') or 0
    if ckpt > since then since = ckpt end
  end
  redis.call('HINCRBYFLOAT', KEYS[1], 'gpu_s_lost', math.max(0, now - since) * ngpus / 1000)
end
if lost then
  local n = redis.call('HINCRBY', KEYS[1], 'lost', 1)
  if n > tonumber(ARGV[10]) then
    new_state = 'failed'
    reason = reason .. '; gave up after ' .. n .. ' lost attempts (retries ' .. ARGV[10] .. ')'
  end
end
redis.call('RPUSH', KEYS[5], cmsgpack.pack({
  attempt = tonumber(f[3] or '0') or 0, epoch = tonumber(ARGV[2]), node = f[2] or '', gpus = gpus,
  assigned_ms = tonumber(f[4] or '0') or 0, started_ms = tonumber(f[5] or '0') or 0, ended_ms = now,
  outcome = outcome, reason = reason, exit_code = ARGV[4]}))
if new_state == 'pending' then
  if ARGV[7] == '1' then
    redis.call('HINCRBY', KEYS[1], 'preemptions', 1)
    redis.call('HSET', KEYS[1], 'last_preempted_ms', ARGV[5])
  end
  redis.call('HINCRBY', KEYS[1], 'attempt', 1)
  redis.call('HINCRBY', KEYS[1], 'epoch', 1)
  redis.call('HSET', KEYS[1], 'state', 'pending', 'node', '', 'gpus', '', 'reason', reason)
  redis.call('HDEL', KEYS[1], 'started_ms', 'assigned_ms', 'pid', 'preempting_ms', 'cancel_ms')
  local score = ARGV[5]
  if ARGV[8] == '1' then score = redis.call('HGET', KEYS[1], 'submit_ms') or ARGV[5] end
  redis.call('ZADD', KEYS[4], score, ARGV[1])
else
  if ARGV[10] ~= '' then redis.call('HINCRBY', KEYS[1], 'epoch', 1) end  -- fence a copy cut off with its node
  redis.call('HSET', KEYS[1], 'state', new_state, 'exit_code', ARGV[4], 'finished_ms', ARGV[5],
             'reason', reason)
  if new_state == 'succeeded' and ARGV[12] ~= '' then
    local run_ms = 0
    for _, raw in ipairs(redis.call('LRANGE', KEYS[5], 0, -1)) do  -- every attempt, this one included
      local ok, a = pcall(cmsgpack.unpack, raw)
      if ok and type(a) == 'table' then
        local s, e = tonumber(a.started_ms), tonumber(a.ended_ms)
        if s and e and s > 0 and e > s then run_ms = run_ms + (e - s) end
      end
    end
    if run_ms > 0 then
      local run = cmsgpack.pack({d = run_ms / 1000, e = tonumber(ARGV[14]),
                                 m = tonumber(redis.call('HGET', KEYS[1], 'peak_gpu_mem_gb') or ''), t = now})
      redis.call('LPUSH', KEYS[8], run)
      redis.call('LTRIM', KEYS[8], 0, tonumber(ARGV[12]) - 1)
      redis.call('LPUSH', KEYS[9], run)
      redis.call('LTRIM', KEYS[9], 0, tonumber(ARGV[13]) - 1)
    end
  end
end
redis.call('SADD', KEYS[7], ARGV[1])  -- the scheduler rereads it (keys.jobs_changed)
return 1
