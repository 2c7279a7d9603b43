-- One field of each of many hashes, in one call (a pipeline of one HGET each costs the client more
-- than the server's work).
-- KEYS[1..n] the hashes   ARGV[1] the field
-- returns the n values: false for a missing hash or field, an error for a key of the wrong type
local out = {}
for i = 1, #KEYS do out[i] = redis.pcall('HGET', KEYS[i], ARGV[1]) end
return out
