-- The scheduler's word on why a pending job waits, and the verdict behind it, written unless the job
-- moved on after the cycle judged it: it is no longer pending, or it was held (hold.lua wrote the
-- held reason, which a cycle that began before the hold must not write over).
-- KEYS[1] job hash
-- ARGV[1] the reason ("" : the scheduler has none now; the verdict goes too)
-- ARGV[2] the verdict, msgpack ("" : none)
-- returns (store/scripts.py Outcome) 1 DONE written; 0 STALE the job moved on, nothing written
if redis.call('HGET', KEYS[1], 'state') ~= 'pending' then return 0 end
local held = redis.call('HGET', KEYS[1], 'hold')
if held and held ~= '' then return 0 end
if ARGV[1] == '' then
  redis.call('HDEL', KEYS[1], 'reason', 'verdict')
  return 1
end
redis.call('HSET', KEYS[1], 'reason', ARGV[1])
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], 'verdict')
else
  redis.call('HSET', KEYS[1], 'verdict', ARGV[2])
end
return 1
