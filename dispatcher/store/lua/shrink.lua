-- A shrunk job checkpointed and stopped: keep some of its GPUs, free the rest, give it a new epoch
-- so that its node agent restarts it on the kept GPUs. The attempt that ran on all of them is recorded in
-- its attempts list (outcome 'shrunk'), as a preempted one is: its GPU time, and the job's first start.
-- KEYS[1] job hash   KEYS[2] node alloc hash   KEYS[3] the job's attempts list   KEYS[4] changed-jobs set
-- ARGV[1] job id     ARGV[2] epoch the agent was given   ARGV[3] GPUs kept "0,1"   ARGV[4] now_ms
-- returns the new epoch (> 0); or 0 STALE (store/scripts.py Outcome: epoch moved or not being preempted)
if tostring(redis.call('HGET', KEYS[1], 'epoch')) ~= ARGV[2] then return 0 end
if redis.call('HGET', KEYS[1], 'state') ~= 'preempting' then return 0 end
local keep = {}
for g in string.gmatch(ARGV[3], '[^,]+') do keep[g] = true end
local gpus = redis.call('HGET', KEYS[1], 'gpus') or ''
local now = tonumber(ARGV[4])
local since = tonumber(redis.call('HGET', KEYS[1], 'started_ms') or ARGV[4]) or now
local ckpt = tonumber(redis.call('HGET', KEYS[1], 'checkpoint_ms') or '0') or 0
if ckpt > since then since = ckpt end
local n = 0
for g in string.gmatch(gpus, '[^,]+') do
  n = n + 1
  if not keep[g] and redis.call('HGET', KEYS[2], g) == ARGV[1] then redis.call('HDEL', KEYS[2], g) end
end
local kept = 0
for _ in pairs(keep) do kept = kept + 1 end
local why = 'shrunk to ' .. kept .. ' of ' .. n .. ' GPUs (keeps GPU' .. (kept == 1 and ' ' or 's ') .. ARGV[3] .. ')'
redis.call('HINCRBY', KEYS[1], 'preemptions', 1)
redis.call('HINCRBYFLOAT', KEYS[1], 'gpu_s_lost', math.max(0, now - since) * n / 1000)
local f = redis.call('HMGET', KEYS[1], 'attempt', 'node', 'assigned_ms', 'started_ms')
redis.call('RPUSH', KEYS[3], cmsgpack.pack({
  attempt = tonumber(f[1] or '0') or 0, epoch = tonumber(ARGV[2]), node = f[2] or '', gpus = gpus,
  assigned_ms = tonumber(f[3] or '0') or 0, started_ms = tonumber(f[4] or '0') or 0, ended_ms = now,
  outcome = 'shrunk', reason = why, exit_code = ''}))
redis.call('HINCRBY', KEYS[1], 'attempt', 1)
local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'state', 'assigned', 'gpus', ARGV[3], 'assigned_ms', ARGV[4],
           'last_preempted_ms', ARGV[4], 'reason', why)
redis.call('HDEL', KEYS[1], 'started_ms', 'pid', 'preempting_ms', 'idle_since_ms', 'warning')
redis.call('SADD', KEYS[#KEYS], ARGV[1])  -- the scheduler rereads it (keys.jobs_changed)
return epoch
