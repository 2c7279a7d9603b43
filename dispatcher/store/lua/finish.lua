-- A job ended, or goes back to the queue: free what it held, record the outcome.
-- KEYS[1] job hash   KEYS[2] node alloc hash   KEYS[3] active zset   KEYS[4] pending zset
-- ARGV[1] job id     ARGV[2] epoch the writer was given   ARGV[3] new state
-- ARGV[4] exit code ("" if none)   ARGV[5] now_ms   ARGV[6] reason
-- ARGV[7] "1" if this requeue is a preemption   ARGV[8] "1" to keep the original submit time for aging
-- ARGV[9] "1" if the job is checkpointable (work lost counts from its last checkpoint)
-- New state 'pending' puts the job back in the queue: attempt + 1, epoch + 1 (fencing any copy
-- still running); a preemption also counts preemptions, last_preempted_ms and gpu_s_lost.
-- returns 1 done; 0 stale write refused (epoch moved or job not active)
if tostring(redis.call('HGET', KEYS[1], 'epoch')) ~= ARGV[2] then return 0 end
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'assigned' and state ~= 'running' and state ~= 'preempting' then return 0 end
local gpus = redis.call('HGET', KEYS[1], 'gpus') or ''
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
if ARGV[3] == 'pending' then
  if ARGV[7] == '1' then
    local now = tonumber(ARGV[5])
    local since = tonumber(redis.call('HGET', KEYS[1], 'started_ms') or ARGV[5]) or now
    if ARGV[9] == '1' then
      local ckpt = tonumber(redis.call('HGET', KEYS[1], 'checkpoint_ms') or '0') or 0
      if ckpt > since then since = ckpt end
    end
    redis.call('HINCRBY', KEYS[1], 'preemptions', 1)
    redis.call('HINCRBYFLOAT', KEYS[1], 'gpu_s_lost', math.max(0, now - since) * ngpus / 1000)
    redis.call('HSET', KEYS[1], 'last_preempted_ms', ARGV[5])
  end
  redis.call('HINCRBY', KEYS[1], 'attempt', 1)
  redis.call('HINCRBY', KEYS[1], 'epoch', 1)
  redis.call('HSET', KEYS[1], 'state', 'pending', 'node', '', 'gpus', '', 'reason', ARGV[6])
  redis.call('HDEL', KEYS[1], 'started_ms', 'assigned_ms', 'pid', 'preempting_ms', 'cancel_ms')
  local score = ARGV[5]
  if ARGV[8] == '1' then score = redis.call('HGET', KEYS[1], 'submit_ms') or ARGV[5] end
  redis.call('ZADD', KEYS[4], score, ARGV[1])
else
  redis.call('HSET', KEYS[1], 'state', ARGV[3], 'exit_code', ARGV[4], 'finished_ms', ARGV[5],
             'reason', ARGV[6])
end
return 1
