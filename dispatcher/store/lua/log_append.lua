-- Append output to a job's log stream, keeping at most ARGV[1] bytes of its latest output, oldest dropped
-- first: a cap in bytes, not in entries, so a job that prints a line at a time keeps as much as one that
-- prints in 64 KiB blocks. Each entry costs its data's length plus ARGV[2] (what Redis spends on an entry).
-- KEYS[1] the log stream   KEYS[2] the job's log sizes (hash: rank -> the stream's bytes in all)
-- ARGV[1] the cap in bytes   ARGV[2] an entry's own cost in bytes   ARGV[3] the rank
-- ARGV[4..] the chunks, an entry each
-- Every entry carries `o`: the stream's bytes up to and including it (an older agent's entry has none and
-- counts as 0), so a trim knows what stays after it. At most the cap stays, but the newest entry always
-- does. Returns the newest `o`.
local key, cap, cost = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
local function offset(entry)  -- and the entry's data
  local f, o, d = entry[2], 0, ''
  for i = 1, #f, 2 do
    if f[i] == 'o' then o = tonumber(f[i + 1]) or 0 elseif f[i] == 'd' then d = f[i + 1] end
  end
  return o, d
end
local o, last = 0, nil  -- (kept beside the stream: reading its newest entry would copy its data)
if redis.call('EXISTS', key) == 1 then o = tonumber(redis.call('HGET', KEYS[2], ARGV[3]) or '0') or 0 end
for i = 4, #ARGV do
  o = o + #ARGV[i] + cost
  last = redis.call('XADD', key, '*', 'd', ARGV[i], 'o', o)
end
redis.call('HSET', KEYS[2], ARGV[3], o)
-- drop the oldest entry while what stays from it on is over the cap (the newest entry always stays)
local batch = 1  -- (usually the oldest entry stays, or one goes: read one, then more while they go)
while o > cap do  -- (never more than the cap written in all: nothing to drop, nothing to read)
  local oldest = redis.call('XRANGE', key, '-', '+', 'COUNT', batch)
  batch = 8
  local dropped, full = {}, true
  for _, e in ipairs(oldest) do
    local at, d = offset(e)
    if e[1] == last or o - (at - #d - cost) <= cap then full = false break end
    dropped[#dropped + 1] = e[1]
  end
  if #dropped > 0 then redis.call('XDEL', key, unpack(dropped)) end
  if not full or #oldest == 0 then break end
end
return o
