-- lock/refresh.lua: extend a job lock, only for its owner. One script because comparing the
-- value and extending must be atomic: between a GET and a PEXPIRE the lock may expire and be
-- taken by another holder, whose lock we would extend.
-- Go caller: lock.Lock.Refresh (internal/lock/lock.go).
-- KEYS[1] lock key   ARGV[1] owner value  [2] ttl ms (integer >= 1)
-- Reply: 'refreshed' | 'not_held' (no lock: it expired) | 'other' (another holder has it).
-- Bad arguments: an error reply, nothing written.

local owner, ttl = ARGV[1], tonumber(ARGV[2])
if not owner or owner == '' or not ttl or ttl < 1 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR lock_refresh: bad owner or ttl')
end
local holder = redis.call('GET', KEYS[1])
if not holder then
  return 'not_held'
end
if holder ~= owner then
  return 'other'
end
redis.call('PEXPIRE', KEYS[1], ttl)
return 'refreshed'
