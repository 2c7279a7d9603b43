-- Rank 0 of a gang says where the others meet it (MASTER_ADDR:MASTER_PORT), for this attempt only.
-- KEYS[1] job hash   ARGV[1] epoch the agent was given   ARGV[2] "address:port"
-- returns (store/scripts.py Outcome) 1 DONE; 0 STALE (epoch moved or the job is not held)
if tostring(redis.call('HGET', KEYS[1], 'epoch')) ~= ARGV[1] then return 0 end
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'assigned' and state ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'rendezvous', ARGV[2])
return 1
