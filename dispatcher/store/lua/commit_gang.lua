-- Place one pending job on several nodes at once (a gang): hold every rank's GPUs and mark it
-- assigned, or nothing at all.
-- KEYS[1] job hash   KEYS[2] pending zset   KEYS[3] active zset   KEYS[4] scheduler leader key
-- KEYS[5] .. KEYS[4 + n] the node alloc hash of each rank, in rank order   KEYS[5 + n] changed-jobs set
-- ARGV[1] job id     ARGV[2] the epoch the plan saw   ARGV[3] now_ms
-- ARGV[4] the leader's fencing value ("<token> <holder>"; "" = not checked, for tests)
-- ARGV[5] the gang, rank 0 first: "node:0,1;node:0,1" (job_record.gang_text)
-- returns the new epoch (> 0); or (store/scripts.py Outcome) -1 NOT_PENDING; -2 EPOCH_MOVED;
-- -3 GPU_HELD a GPU of some rank is held; -4 NOT_LEADER the caller no longer leads
if ARGV[4] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[4] then return -4 end
if redis.call('HGET', KEYS[1], 'state') ~= 'pending' then return -1 end
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0') or 0
if epoch ~= tonumber(ARGV[2]) then return -2 end
local ranks = {}
for piece in string.gmatch(ARGV[5], '[^;]+') do
  local node, gpus = string.match(piece, '^([^:]+):(.*)$')
  ranks[#ranks + 1] = {node, gpus}
end
for i, r in ipairs(ranks) do
  for g in string.gmatch(r[2], '[^,]+') do
    if redis.call('HEXISTS', KEYS[4 + i], g) == 1 then return -3 end
  end
end
for i, r in ipairs(ranks) do
  for g in string.gmatch(r[2], '[^,]+') do redis.call('HSET', KEYS[4 + i], g, ARGV[1]) end
end
epoch = epoch + 1
redis.call('HSET', KEYS[1], 'state', 'assigned', 'node', ranks[1][1], 'gpus', ranks[1][2], 'gang', ARGV[5],
           'ranks_left', #ranks, 'epoch', epoch, 'assigned_ms', ARGV[3], 'reason', '')
redis.call('HDEL', KEYS[1], 'ranks_ended', 'gang_end', 'rendezvous', 'progress_ms')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
redis.call('SADD', KEYS[#KEYS], ARGV[1])  -- the scheduler rereads it (keys.jobs_changed)
return epoch
