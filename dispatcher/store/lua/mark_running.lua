-- A node agent started the job's process (for a gang: one rank's; the job runs from its first rank on).
-- KEYS[1] job hash   KEYS[2] metrics hash   KEYS[3] changed-jobs set
-- ARGV[1] epoch the agent was given   ARGV[2] now_ms   ARGV[3] pid
-- ARGV[4] the start-latency histogram's field prefix ("name|class=")   ARGV[5] its bounds, seconds, "a,b,..."
-- ARGV[6] job id
-- returns (store/scripts.py Outcome) 1 DONE started; 0 STALE (epoch moved or job not assigned; a gang's
-- rank may also start while the gang runs or stops: its stop then comes from the agent's check);
-- 2 CANCEL_REQUESTED started, but a cancel was requested meanwhile (after the agent read the record): the
-- agent stops it as a cancel (its signal, its grace), and its run counts from here
-- An attempt's start is observed here, once, in the histogram (store/counters.py): where it happens,
-- whatever the scheduler's mirror saw of it. A shrunk job's restart on fewer GPUs is no start.
if tostring(redis.call('HGET', KEYS[1], 'epoch')) ~= ARGV[1] then return 0 end
local state = redis.call('HGET', KEYS[1], 'state')
local gang = (redis.call('HGET', KEYS[1], 'gang') or '') ~= ''
if state ~= 'assigned' and not (gang and (state == 'running' or state == 'preempting')) then return 0 end
local cancelled = redis.call('HEXISTS', KEYS[1], 'cancel_ms') == 1
if state == 'assigned' then
  redis.call('HSET', KEYS[1], 'state', 'running', 'started_ms', ARGV[2], 'pid', ARGV[3])
  local assigned = tonumber(redis.call('HGET', KEYS[1], 'assigned_ms') or '')
  -- shrink.lua's restart says so in its reason (a placement's commit clears it); not a time that may
  -- equal a placement's in the same millisecond
  local shrunk = string.sub(redis.call('HGET', KEYS[1], 'reason') or '', 1, 10) == 'shrunk to '
  if assigned and assigned > 0 and not shrunk then
    local ok, spec = pcall(cmsgpack.unpack, redis.call('HGET', KEYS[1], 'spec') or '')
    local class = ok and type(spec) == 'table' and type(spec.prio) == 'string' and string.match(spec.prio, '^%a+$')
      or 'unknown'
    local latency = math.max(0, tonumber(ARGV[2]) - assigned) / 1000
    local i = 0  -- the first bound not below it (bisect_left)
    for bound in string.gmatch(ARGV[5], '[^,]+') do
      if latency > tonumber(bound) then i = i + 1 end
    end
    local base = ARGV[4] .. class .. '|'
    redis.call('HINCRBY', KEYS[2], base .. 'b' .. i, 1)
    redis.call('HINCRBYFLOAT', KEYS[2], base .. 'sum', string.format('%.6f', latency))
    redis.call('HINCRBY', KEYS[2], base .. 'count', 1)
  end
end
redis.call('SADD', KEYS[#KEYS], ARGV[#ARGV])  -- the scheduler rereads it (keys.jobs_changed)
if cancelled then return 2 end
return 1
