-- lock/release.lua: give a job lock back, only for its owner. One script because comparing the
-- value and deleting must be atomic: a plain DEL after a GET could delete the lock of the next
-- holder, taken in between after ours expired.
-- Go caller: lock.Lock.Release (internal/lock/lock.go).
-- KEYS[1] lock key   ARGV[1] owner value
-- Reply: 'released' | 'not_held' (no lock: it expired) | 'other' (another holder has it).
-- Bad arguments: an error reply, nothing written.

local owner = ARGV[1]
if not owner or owner == '' then
  return redis.error_reply('ERR lock_release: bad owner')
end
local holder = redis.call('GET', KEYS[1])
if not holder then
  return 'not_held'
end
if holder ~= owner then
  return 'other'
end
redis.call('DEL', KEYS[1])
return 'released'
