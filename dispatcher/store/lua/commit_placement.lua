-- Place one pending job on a node: hold its GPUs and mark it assigned.
-- KEYS[1] job hash   KEYS[2] node alloc hash   KEYS[3] pending zset   KEYS[4] active zset
-- KEYS[5] scheduler leader key   KEYS[6] changed-jobs set
-- ARGV[1] job id     ARGV[2] node name         ARGV[3] GPU indices "0,1" ("" for none)
-- ARGV[4] the epoch the plan saw               ARGV[5] now_ms
-- ARGV[6] "1" if the job shares its GPUs (alloc value "~id1,id2"), else "0" (alloc value "id")
-- ARGV[7] the leader's fencing value ("<token> <holder>"; "" = not checked, for tests)
-- returns the new epoch (> 0); or (store/scripts.py Outcome) -1 NOT_PENDING job not pending; -2 EPOCH_MOVED
-- epoch moved; -3 GPU_HELD a GPU is held (exclusively, or by sharers when this job wants it alone);
-- -4 NOT_LEADER the caller no longer leads
if ARGV[7] ~= '' and redis.call('GET', KEYS[5]) ~= ARGV[7] then return -4 end
if redis.call('HGET', KEYS[1], 'state') ~= 'pending' then return -1 end
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0') or 0
if epoch ~= tonumber(ARGV[4]) then return -2 end
local share = ARGV[6] == '1'
local gpus = {}
for g in string.gmatch(ARGV[3], '[^,]+') do
  local held = redis.call('HGET', KEYS[2], g)
  if held and not (share and string.sub(held, 1, 1) == '~') then return -3 end
  gpus[#gpus + 1] = {g, held}
end
for _, gh in ipairs(gpus) do
  local value = ARGV[1]
  if share then value = gh[2] and (gh[2] .. ',' .. ARGV[1]) or ('~' .. ARGV[1]) end
  redis.call('HSET', KEYS[2], gh[1], value)
end
epoch = epoch + 1
redis.call('HSET', KEYS[1], 'state', 'assigned', 'node', ARGV[2], 'gpus', ARGV[3],
           'epoch', epoch, 'assigned_ms', ARGV[5], 'reason', '')
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[1])
redis.call('SADD', KEYS[#KEYS], ARGV[1])  -- the scheduler rereads it (keys.jobs_changed)
return epoch
