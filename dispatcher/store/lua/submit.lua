-- Submit a batch of jobs: each job's hash, the all-jobs and pending indexes, the changed-jobs set.
-- One script call instead of a command per job: the client packs one command for the whole batch.
-- KEYS[1..n] the jobs' hashes   KEYS[n+1] all-jobs zset   KEYS[n+2] pending zset   KEYS[n+3] changed-jobs set
-- ARGV, job after job in KEYS' order: id, submit_ms, k, then k field/value pairs (the spec and any
--   prediction or signature fields)
-- returns n; an error, before anything is written, if an index is of the wrong type (the scheduler sets
--   it aside: store/quarantine.py)
local n = #KEYS - 3
local all, pending, changed = KEYS[n + 1], KEYS[n + 2], KEYS[n + 3]
for _, kt in ipairs({{all, 'zset'}, {pending, 'zset'}, {changed, 'set'}}) do
  local t = redis.call('TYPE', kt[1])['ok']
  if t ~= 'none' and t ~= kt[2] then
    return redis.error_reply('WRONGTYPE ' .. kt[1] .. ' is a ' .. t .. ', not a ' .. kt[2])
  end
end
local CHUNK = 2000  -- jobs per variadic ZADD/SADD (unpack is limited by Lua's stack)
local since, ids = {}, {}
local a = 1
local function flush()
  if #ids == 0 then return end
  redis.call('ZADD', all, unpack(since))
  redis.call('ZADD', pending, unpack(since))
  redis.call('SADD', changed, unpack(ids))
  since, ids = {}, {}
end
for i = 1, n do
  local id, ms, k = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  redis.call('HSET', KEYS[i], 'state', 'pending', 'attempt', '0', 'epoch', '0', 'submit_ms', ms,
             unpack(ARGV, a + 3, a + 2 + 2 * k))
  since[#since + 1], since[#since + 2], ids[#ids + 1] = ms, id, id
  if #ids == CHUNK then flush() end
  a = a + 3 + 2 * k
end
flush()
return n
