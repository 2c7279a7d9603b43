-- take_changed.lua: the change feed (store/feed.py). The leader moves the changed-jobs set into the
-- feed, one entry a take; every scheduler reads the entries past its own cursor.
-- KEYS[1] keys.jobs_changed (set)   KEYS[2] keys.jobs_feed (stream)
-- ARGV[1] '1': take the set into the feed first (the leader); '0': only read (a standby)
-- ARGV[2] the id of the last entry the caller has; '' for none (a whole read: only where the feed stands)
-- ARGV[3] that entry's n ('0' for none)
-- ARGV[4] the entries kept (XADD MAXLEN ~)
-- An entry: n (one more than the entry before it) and ids (the members taken, a msgpack array).
-- Returns {last entry id ('0-0' while the feed is empty), its n, gap, id, id, ...}: the job ids of the
-- entries past the caller's; gap 1 when entries it never had are gone (trimmed, or the feed was lost),
-- and it must read everything again.
local function last()
  local e = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
  if #e == 0 then
    return '0-0', 0
  end
  local f = e[1][2]
  for i = 1, #f, 2 do
    if f[i] == 'n' then
      return e[1][1], tonumber(f[i + 1]) or 0
    end
  end
  return e[1][1], 0
end

if ARGV[1] == '1' then
  local ids = redis.call('SMEMBERS', KEYS[1])
  if #ids > 0 then
    redis.call('DEL', KEYS[1])
    local _, n = last()
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'n', n + 1, 'ids', cmsgpack.pack(ids))
  end
end
local id, n = last()
local out = {id, n, 0}
if ARGV[2] == '' then
  return out
end
local want = (tonumber(ARGV[3]) or 0) + 1
local after = '(' .. ARGV[2]  -- past the caller's entry (an exclusive range)
local entries = redis.call('XRANGE', KEYS[2], after, '+')
if #entries == 0 then
  if id ~= ARGV[2] then
    out[3] = 1  -- the feed no longer holds the caller's entry, and nothing after it: lost
  end
  return out
end
for _, e in ipairs(entries) do
  local f, got, ids = e[2], nil, ''
  for i = 1, #f, 2 do
    if f[i] == 'n' then
      got = tonumber(f[i + 1])
    elseif f[i] == 'ids' then
      ids = f[i + 1]
    end
  end
  if got ~= want then
    return {id, n, 1}  -- an entry between the caller's and this one is gone
  end
  want = want + 1
  if ids ~= '' then
    for _, job in ipairs(cmsgpack.unpack(ids)) do  -- as the set held them, whatever they are
      out[#out + 1] = job
    end
  end
end
return out
