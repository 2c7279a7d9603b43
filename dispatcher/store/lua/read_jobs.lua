-- Read jobs for the scheduler: each job's fields and its place in the pending index, in one call
-- (a pipeline of two commands a job costs the client more than the server's work).
-- KEYS[1..n] the jobs' hashes   KEYS[n+1] pending zset (or another zset to take the scores from)
-- ARGV[1] m, how many fields   ARGV[2..m+1] the fields   then for each job: its id, and one more field
--   to read ('spec' while its spec is not cached yet, else 'state')
-- returns for each job {its m+1 values, its pending score or false}, or an error (a key of the wrong type)
local n, m = #KEYS - 1, tonumber(ARGV[1])
local fields = {}
for j = 1, m do fields[j] = ARGV[j + 1] end
local out = {}
for i = 1, n do
  local id, extra = ARGV[m + 2 * i], ARGV[m + 2 * i + 1]
  fields[m + 1] = extra
  local values = redis.pcall('HMGET', KEYS[i], unpack(fields))
  if type(values) == 'table' and values.err then
    out[i] = values
  else
    local ok, score = pcall(redis.call, 'ZSCORE', KEYS[n + 1], id)  -- (no score from a zset of the wrong type:
    out[i] = {values, ok and score}                                   -- the scheduler checks the index's type)
  end
end
return out
