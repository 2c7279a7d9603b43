-- Rename a key of the wrong type aside, into quarantine, and record it.
-- KEYS[1] the key   KEYS[2] where it goes   KEYS[3] quarantine stream
-- ARGV[1] the type it should have   ARGV[2] now_ms   ARGV[3] the stream's cap (MAXLEN ~)   ARGV[4] reason
-- returns the type it had when moved, or false (it has the right type, is gone, or KEYS[2] is taken)
local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'none' or t == ARGV[1] then return false end
if redis.call('EXISTS', KEYS[2]) == 1 then return false end
redis.call('RENAME', KEYS[1], KEYS[2])
pcall(redis.call, 'XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', 'key', KEYS[1], 'member', '', 'score', '',
      'reason', ARGV[4] .. ' (a ' .. t .. ', not a ' .. ARGV[1] .. ')', 'moved_to', KEYS[2], 'at_ms', ARGV[2])
return t
