-- Put jobs back in the indexes their records say they belong to (after an index of the wrong type
-- was set aside). Adds only (ZADD NX): an entry a script wrote meanwhile stays as it is.
-- KEYS[1..n] the jobs' hashes   KEYS[n+1] all-jobs zset   KEYS[n+2] pending zset   KEYS[n+3] active zset
-- ARGV[1] now_ms   ARGV[2] which to rebuild, any of "a" (all), "p" (pending), "x" (active)
-- ARGV[3..n+2] the jobs' ids
-- returns how many entries were added (the scheduler that rebuilds reads everything again after)
local n = #KEYS - 3
local all, pending, active = KEYS[n + 1], KEYS[n + 2], KEYS[n + 3]
local now, which = tonumber(ARGV[1]), ARGV[2]
local MAX_MS = 9007199254740992
local function time_or_now(v)
  local ms = tonumber(v)
  if not ms or ms ~= ms or ms < -MAX_MS or ms > MAX_MS then return now end
  return ms
end
local added = 0
for i = 1, n do
  local id = ARGV[i + 2]
  local f = redis.pcall('HMGET', KEYS[i], 'state', 'submit_ms', 'assigned_ms')
  if type(f) == 'table' and not f.err and f[1] then
    local state = f[1]
    if string.find(which, 'a', 1, true) then
      added = added + redis.call('ZADD', all, 'NX', time_or_now(f[2]), id)
    end
    if state == 'pending' and string.find(which, 'p', 1, true) then
      added = added + redis.call('ZADD', pending, 'NX', time_or_now(f[2]), id)
    elseif (state == 'assigned' or state == 'running' or state == 'preempting') and string.find(which, 'x', 1, true) then
      added = added + redis.call('ZADD', active, 'NX', time_or_now(f[3]), id)
    end
  end
end
return added
