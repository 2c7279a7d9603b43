-- The scheduler leader's lease, with a fencing token (docs/guarantees.md).
-- KEYS[1] leader key (string "<token> <holder>", with a TTL)   KEYS[2] token counter
-- ARGV[1] holder id   ARGV[2] ttl_ms   ARGV[3] "hold" (acquire or renew) | "release"
-- hold returns the token (> 0) while this holder leads, 0 while another does;
-- release returns 1 if this holder let go, 0 if it did not hold the lease.
local cur = redis.call('GET', KEYS[1])
local held = false
local token = 0
if cur then
  local sp = string.find(cur, ' ', 1, true)
  token = tonumber(string.sub(cur, 1, sp - 1))
  held = string.sub(cur, sp + 1) == ARGV[1]
end
if ARGV[3] == 'release' then
  if held then redis.call('DEL', KEYS[1]); return 1 end
  return 0
end
if cur and not held then return 0 end
if not cur then
  token = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], token .. ' ' .. ARGV[1], 'PX', ARGV[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return token
