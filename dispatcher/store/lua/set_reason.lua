-- The scheduler's word on why a pending job waits, and the verdict behind it, written unless the job
-- moved on after the cycle judged it: it is no longer pending, or it was held (hold.lua wrote the
-- held reason, which a cycle that began before the hold must not write over).
-- KEYS[1] job hash
-- ARGV[1] the reason ("" : the scheduler has none now; the verdict goes too)
-- ARGV[2] the verdict, msgpack ("" : none)
-- returns (store/scripts.py Outcome) 1 DONE written; 0 STALE the job moved on, nothing written
local f = redis.call('HMGET', KEYS[1], 'state', 'hold')
if f[1] ~= 'pending' then return 0 end
if f[2] and f[2] ~= '' then return 0 end
if ARGV[1] == '' then
  redis.call('HDEL', KEYS[1], 'reason', 'verdict')
elseif ARGV[2] == '' then
  redis.call('HSET', KEYS[1], 'reason', ARGV[1])
  redis.call('HDEL', KEYS[1], 'verdict')
else
  redis.call('HSET', KEYS[1], 'reason', ARGV[1], 'verdict', ARGV[2])
end
return 1
