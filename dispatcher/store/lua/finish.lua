-- A job ended, or goes back to the queue: free what it held, record the outcome and the attempt.
-- KEYS[1] job hash   KEYS[2] node alloc hash   KEYS[3] active zset   KEYS[4] pending zset
-- KEYS[5] the job's attempts list   KEYS[6] scheduler leader key   KEYS[7] changed-jobs set
-- KEYS[8] the history list of the job's fingerprint   KEYS[9] the history list of its user
-- KEYS[10..12] the ended-jobs indexes of succeeded, failed and cancelled jobs (id -> finished_ms)
-- KEYS[13] the metrics hash: an end is counted here, by final state and class, with its attempt's run time
--   (store/counters.py), whoever leads or not
-- KEYS[14] the notify queue, given by the scheduler only (a dead node's job that ends here with a --notify
--   is queued for the leader to tell: no agent will)
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
-- ARGV[15] "" for a one-node job; for a gang, the rank whose end this is (KEYS[2] is its node's alloc)
-- ARGV[16] "1" if this rank only stopped because its gang stops (its end says nothing of the gang's)
-- ARGV[17] "1" if its node could not start it: with ARGV[10], a lost attempt though it never started
-- ARGV[18] "" normally; for a failed attempt, the job's --retry-failed: within it (counted in `failures`)
--   the job goes back to the queue instead of failing
-- ARGV[19] the run-time histogram's field prefix ("job_run|class=")   ARGV[20] its bounds, seconds, "a,b,..."
-- ARGV[21] "1" if ARGV[4] is the job's own end (a gang's rank killed by a signal nobody in dispatch sent):
--   a job that fails for its lost attempts keeps it, as it keeps a rank's own exit status
-- A gang's rank frees its own GPUs. Its first end that is no success (and not ARGV[16]) is what the gang
-- ends as (gang_end): the job is marked preempting, and the agents of the other ranks stop theirs (each
-- sees the mark at its next check). The last rank's end ends the job as that first end said.
-- New state 'pending' puts the job back in the queue: attempt + 1, epoch + 1 (fencing any copy
-- still running); a preemption or a lost attempt also counts gpu_s_lost. A job a user asked to cancel
-- (cancel_ms) is not requeued: its attempt lost with its agent or node, or preempted, ends it cancelled.
-- An attempt lost while it was being preempted is that preemption's end: not counted in `lost`.
-- returns (store/scripts.py Outcome) 1 DONE; 0 STALE write refused (epoch moved or job not active);
-- -4 NOT_LEADER the caller no longer leads
local function job_class(raw)  -- the class a job's spec names ('unknown' if it does not read)
  local ok, spec = pcall(cmsgpack.unpack, raw or '')
  return ok and type(spec) == 'table' and type(spec.prio) == 'string' and string.match(spec.prio, '^%a+$') or 'unknown'
end
local function observe(hash, base, bounds, value)  -- one observation of a histogram (store/counters.py)
  local i = 0  -- the first bound not below it (bisect_left)
  for bound in string.gmatch(bounds, '[^,]+') do
    if value > tonumber(bound) then i = i + 1 end
  end
  redis.call('HINCRBY', hash, base .. 'b' .. i, 1)
  redis.call('HINCRBYFLOAT', hash, base .. 'sum', string.format('%.6f', value))
  redis.call('HINCRBY', hash, base .. 'count', 1)
end
if ARGV[11] ~= '' and redis.call('GET', KEYS[6]) ~= ARGV[11] then return -4 end
if tostring(redis.call('HGET', KEYS[1], 'epoch')) ~= ARGV[2] then return 0 end
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'assigned' and state ~= 'running' and state ~= 'preempting' then return 0 end
local A = {}  -- the arguments the end is recorded with: this one's, or for a gang its first end's
for i = 1, #ARGV do A[i] = ARGV[i] end
local now = tonumber(ARGV[5])
local f = redis.call('HMGET', KEYS[1], 'gpus', 'node', 'attempt', 'assigned_ms', 'started_ms', 'checkpoint_ms',
                     'gang', 'ranks_ended', 'gang_end', 'preempted_by', 'preempt_reason')
local gpus = f[1] or ''
local gang = f[7] or ''
local ngpus = 0
if gang ~= '' and (ARGV[15] or '') ~= '' then
  local rank, i, mine = tonumber(ARGV[15]), 0, nil
  if string.find(',' .. (f[8] or ''), ',' .. ARGV[15] .. ',', 1, true) then return 0 end  -- recorded
  for piece in string.gmatch(gang, '[^;]+') do
    local g = string.match(piece, ':(.*)$') or ''
    if i == rank then mine = g end
    for _ in string.gmatch(g, '[^,]+') do ngpus = ngpus + 1 end
    i = i + 1
  end
  if mine == nil then return 0 end
  for g in string.gmatch(mine, '[^,]+') do
    if redis.call('HGET', KEYS[2], g) == ARGV[1] then redis.call('HDEL', KEYS[2], g) end
  end
  local ended = (f[8] or '') .. ARGV[15] .. ','
  redis.call('HSET', KEYS[1], 'ranks_ended', ended)
  local left = redis.call('HINCRBY', KEYS[1], 'ranks_left', -1)
  local first = f[9]
  if not first and ARGV[3] ~= 'succeeded' and ARGV[16] ~= '1' then
    first = cmsgpack.pack({ARGV[3], ARGV[4], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[21] or ''})
    redis.call('HSET', KEYS[1], 'gang_end', first)
  end
  if left > 0 then
    if first and state ~= 'preempting' then  -- the other ranks stop (the agents' check sees the mark)
      redis.call('HSET', KEYS[1], 'state', 'preempting', 'preempting_ms', ARGV[5],
                 'preempt_reason', 'its gang stops: ' .. ARGV[6])
    end
    redis.call('SADD', KEYS[7], ARGV[1])  -- the scheduler rereads it (keys.jobs_changed)
    return 1
  end
  if first then
    local e = cmsgpack.unpack(first)
    A[3], A[4], A[6], A[7], A[8], A[9], A[10], A[21] = e[1], e[2], e[3], e[4], e[5], e[6], e[7], e[8] or ''
  elseif ARGV[16] == '1' then  -- every rank stopped for the gang: a preemption, else the gang's requeue
    A[3], A[4], A[10] = 'pending', '', ''
    if f[10] then A[6], A[7] = f[11] or ('preempted by ' .. f[10]), '1' else A[6], A[7] = 'its gang stopped', '0' end
  end
  gpus = ''  -- freed rank by rank
elseif A[10] ~= '' and state == 'preempting' and f[10] and A[3] == 'pending' then
  -- lost while its preemption's grace ran (its agent or node died): the preemption's end, not a lost
  -- attempt: it was asked to stop, and goes back to the queue uncounted, as it would have
  A[6], A[7], A[10] = (f[11] or ('preempted by ' .. f[10])) .. '; it ended within the grace as ' ..
    (string.gsub(A[6], '; attempt lost$', '')), '1', ''
end
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
local new_state, reason = A[3], A[6]
local outcome = new_state
-- an attempt that never started lost nothing, unless its node failed to start it (a node that can start
-- nothing would else hold it, and take it back again, for ever)
local lost = A[10] ~= '' and (state ~= 'assigned' or ARGV[17] == '1')
if new_state == 'pending' then
  outcome = 'requeued'
  if A[7] == '1' then outcome = 'preempted' end
  if A[10] ~= '' then outcome = 'lost' end
end
if A[7] == '1' or lost then
  local since = tonumber(f[5] or ARGV[5]) or now
  if A[9] == '1' then
    local ckpt = tonumber(f[6] or '0') or 0
    if ckpt > since then since = ckpt end
  end
  redis.call('HINCRBYFLOAT', KEYS[1], 'gpu_s_lost', math.max(0, now - since) * ngpus / 1000)
end
local code = A[4]  -- the job's exit code; none of its own when it fails for its lost attempts
local cancel_asked = redis.call('HEXISTS', KEYS[1], 'cancel_ms') == 1
if new_state == 'failed' and (ARGV[18] or '') ~= '' and gang == '' and not cancel_asked then
  local n = redis.call('HINCRBY', KEYS[1], 'failures', 1)
  if n <= tonumber(ARGV[18]) then  -- run again (--retry-failed): the attempt is recorded as failed
    new_state = 'pending'
    reason = reason .. '; run again (failure ' .. n .. ' of ' .. ARGV[18] .. ' --retry-failed allows)'
  end
end
-- a cancel asked while it ran is kept, not requeued with the attempt (nor failed for a last lost one)
local cancelled = new_state == 'pending' and cancel_asked
if lost then
  local n = redis.call('HINCRBY', KEYS[1], 'lost', 1)
  if n > tonumber(A[10]) and not cancelled then
    -- (the attempt keeps the signal dispatch or the node's loss gave it; the job keeps an exit code of its
    -- own: a gang's rank that exited 3 each time fails the job with 3, as Slurm's step)
    new_state = 'failed'
    if not (tonumber(code) and (tonumber(code) > 0 or A[21] == '1')) then code = '' end
    reason = reason .. '; gave up after ' .. n .. ' lost attempts (retries ' .. A[10] .. ')'
  end
end
redis.call('RPUSH', KEYS[5], cmsgpack.pack({
  attempt = tonumber(f[3] or '0') or 0, epoch = tonumber(ARGV[2]), node = f[2] or '', gpus = f[1] or '',
  assigned_ms = tonumber(f[4] or '0') or 0, started_ms = tonumber(f[5] or '0') or 0, ended_ms = now,
  outcome = outcome, reason = reason, exit_code = A[4], gang = gang}))
if cancelled then
  new_state = 'cancelled'
  reason = (redis.call('HGET', KEYS[1], 'cancel_reason') or 'cancelled') .. '; its attempt ended first: ' .. reason
end
if new_state == 'pending' then
  if A[7] == '1' then
    redis.call('HINCRBY', KEYS[1], 'preemptions', 1)
    redis.call('HSET', KEYS[1], 'last_preempted_ms', ARGV[5])
  end
  redis.call('HINCRBY', KEYS[1], 'attempt', 1)
  redis.call('HINCRBY', KEYS[1], 'epoch', 1)
  redis.call('HSET', KEYS[1], 'state', 'pending', 'node', '', 'gpus', '', 'reason', reason)
  redis.call('HDEL', KEYS[1], 'started_ms', 'assigned_ms', 'pid', 'preempting_ms', 'cancel_ms', 'cancel_reason', 'gang',
             'ranks_left', 'ranks_ended', 'gang_end', 'rendezvous', 'progress_ms')
  local score = ARGV[5]
  if A[8] == '1' then score = redis.call('HGET', KEYS[1], 'submit_ms') or ARGV[5] end
  redis.call('ZADD', KEYS[4], score, ARGV[1])
else
  if A[10] ~= '' then redis.call('HINCRBY', KEYS[1], 'epoch', 1) end  -- fence a copy cut off with its node
  redis.call('HSET', KEYS[1], 'state', new_state, 'exit_code', code, 'finished_ms', ARGV[5],
             'reason', reason)
  local ended = ({succeeded = KEYS[10], failed = KEYS[11], cancelled = KEYS[12]})[new_state]
  if ended then redis.call('ZADD', ended, ARGV[5], ARGV[1]) end
  if KEYS[14] and redis.call('HEXISTS', KEYS[1], 'notify') == 1 then redis.call('RPUSH', KEYS[14], ARGV[1]) end
  local class = job_class(redis.call('HGET', KEYS[1], 'spec'))
  redis.call('HINCRBY', KEYS[13], 'jobs_ended|class=' .. class .. ',state=' .. new_state, 1)
  local started = tonumber(f[5] or '') or 0
  if started > 0 and now >= started then observe(KEYS[13], ARGV[19] .. class .. '|', ARGV[20], (now - started) / 1000) end
  if new_state == 'succeeded' and A[12] ~= '' then
    local run_ms = 0
    for _, raw in ipairs(redis.call('LRANGE', KEYS[5], 0, -1)) do  -- every attempt, this one included
      local ok, a = pcall(cmsgpack.unpack, raw)
      if ok and type(a) == 'table' then
        local s, e = tonumber(a.started_ms), tonumber(a.ended_ms)
        if s and e and s > 0 and e > s then run_ms = run_ms + (e - s) end
      end
    end
    if run_ms > 0 then
      local run = cmsgpack.pack({d = run_ms / 1000, e = tonumber(A[14]),
                                 m = tonumber(redis.call('HGET', KEYS[1], 'peak_gpu_mem_gb') or ''), t = now})
      redis.call('LPUSH', KEYS[8], run)
      redis.call('LTRIM', KEYS[8], 0, tonumber(A[12]) - 1)
      redis.call('LPUSH', KEYS[9], run)
      redis.call('LTRIM', KEYS[9], 0, tonumber(A[13]) - 1)
    end
  end
end
redis.call('SADD', KEYS[7], ARGV[1])  -- the scheduler rereads it (keys.jobs_changed)
return 1
