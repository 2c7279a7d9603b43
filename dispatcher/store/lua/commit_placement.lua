-- Place one pending job on a node: hold its GPUs and mark it assigned.
-- KEYS[1] job hash   KEYS[2] node alloc hash   KEYS[3] pending zset   KEYS[4] active zset
-- ARGV[1] job id     ARGV[2] node name         ARGV[3] GPU indices "0,1" ("" for none)
-- ARGV[4] the epoch the plan saw               ARGV[5] now_ms
-- returns the new epoch (> 0); -1 job not pending; -2 epoch moved; -3 a GPU is already held
if redis.call('HGET', KEYS[1], 'state') ~= 'pending' then return -1 end
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0') or 0
if epoch ~= tonumber(ARGV[4]) then return -2 end
local gpus = {}
for g in string.gmatch(ARGV[3], '[^,]+') do
  if redis.call('HEXISTS', KEYS[2], g) == 1 then return -3 end
  gpus[#gpus + 1] = g
end
for _, g in ipairs(gpus) do redis.call('HSET', KEYS[2], g, ARGV[1]) end
epoch = epoch + 1
redis.call('HSET', KEYS[1], 'state', 'assigned', 'node', ARGV[2], 'gpus', ARGV[3],
           'epoch', epoch, 'assigned_ms', ARGV[5], 'reason', '')
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[1])
return epoch
