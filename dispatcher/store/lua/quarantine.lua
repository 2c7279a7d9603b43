-- Quarantine bad entries of one index: each leaves the index (or is put right) only if it is still
-- the entry that was read, and is recorded with its reason in the quarantine stream.
-- KEYS[1] quarantine stream   KEYS[2] the index   KEYS[3] the changed set of what the index holds
--   (a restored job is read again)   KEYS[4..n+3] per entry: the record its check reads (a job or node
--   hash; the index again where none)
-- ARGV[1] now_ms   ARGV[2] the stream's cap (MAXLEN ~)   ARGV[3] the index's type: zset | set | hash | string
-- then 5 per entry: member (the field of a hash), check, expect, reason, restore
-- checks (the entry is still what was read):
--   score   (zset) the member's score is `expect` (as Redis prints it, or the same number)
--   state   the member is in the index and its record is not a hash, or has no state among the
--           comma-separated `expect`
--   field   the member is in the index and its record is not a hash, or has no field `expect`
--   member  the member is in the index (the member itself is bad: not a job id or a node name)
--   value   (hash) field `member` holds `expect`; (string) the key holds `expect`
--   gone    the entry already left (the changed set is taken whole): recorded only
-- restore: "" removes the entry; "submit_ms" (zset) gives the member its record's submit_ms instead
--   (now when that is not a time); (string) the value to set instead
-- returns the numbers (1-based) of the entries quarantined, negative for those the stream could not
--   record (KEYS[1] is of the wrong type)
local MAX_MS = 9007199254740992
local now, cap, kind = ARGV[1], ARGV[2], ARGV[3]
local index = KEYS[2]

local function present(member, expect)
  local ok, got
  if kind == 'zset' then ok, got = pcall(redis.call, 'ZSCORE', index, member); return ok and got
  elseif kind == 'set' then ok, got = pcall(redis.call, 'SISMEMBER', index, member); return ok and got == 1
  elseif kind == 'hash' then ok, got = pcall(redis.call, 'HGET', index, member); return ok and got
  else ok, got = pcall(redis.call, 'GET', index); return ok and got end
end

local function kind_of(key)
  return redis.call('TYPE', key)['ok']
end

local function still_bad(member, check, expect, record)
  if check == 'gone' then return 'gone' end
  local at = present(member, expect)
  if not at then return nil end
  if check == 'member' then return 'in the index' end
  if check == 'score' then
    if at == expect or tonumber(at) == tonumber(expect) then return 'score ' .. at end
    return nil
  end
  if check == 'value' then
    if at == expect then return 'holds ' .. at end
    return nil
  end
  local t = kind_of(record)
  if t == 'none' then return 'no record' end
  if t ~= 'hash' then return 'its record is a ' .. t end
  if check == 'field' then
    if redis.call('HEXISTS', record, expect) == 0 then return 'its record has no ' .. expect end
    return nil
  end
  local state = redis.call('HGET', record, 'state')
  if not state then return 'its record has no state' end
  for s in string.gmatch(expect, '[^,]+') do
    if s == state then return nil end
  end
  return 'its state is ' .. state
end

local done = {}
local a = 4
for i = 1, #KEYS - 3 do
  local member, check, expect, reason, restore = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  a = a + 5
  local record = KEYS[i + 3]
  local found = still_bad(member, check, expect, record)
  if found then
    local score, fixed = '', ''
    if kind == 'zset' and check ~= 'gone' then score = redis.call('ZSCORE', index, member) or '' end
    if check == 'gone' then
    elseif kind == 'zset' and restore == 'submit_ms' then
      local ok, ms = pcall(redis.call, 'HGET', record, 'submit_ms')
      ms = ok and tonumber(ms)
      if not ms or ms ~= ms or ms < -MAX_MS or ms > MAX_MS then ms = tonumber(now) end
      fixed = string.format('%.0f', ms)
      redis.call('ZADD', index, fixed, member)
      redis.call('SADD', KEYS[3], member)
    elseif kind == 'zset' then redis.call('ZREM', index, member)
    elseif kind == 'set' then redis.call('SREM', index, member)
    elseif kind == 'hash' then redis.call('HDEL', index, member)
    elseif restore ~= '' then redis.call('SET', index, restore); fixed = restore
    else redis.call('DEL', index) end
    local recorded = pcall(redis.call, 'XADD', KEYS[1], 'MAXLEN', '~', cap, '*', 'key', index, 'member', member,
                           'score', score, 'reason', reason .. ' (' .. found .. ')', 'restored', fixed, 'at_ms', now)
    if recorded then done[#done + 1] = i else done[#done + 1] = -i end
  end
end
return done
