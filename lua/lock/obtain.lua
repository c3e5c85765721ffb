-- lock/obtain.lua: take a job lock and, only when taken, the next fencing number. One script
-- so the two cannot part: a holder's number is above every earlier holder's, and a refused
-- caller consumes none.
-- Go caller: lock.Locker.ObtainAbove (internal/lock/lock.go).
-- KEYS[1] lock key  [2] fencing counter (same hash tag)
-- ARGV[1] owner value (random per holder, non-empty)  [2] ttl ms (integer 1..1e13)
--   [3] floor (integer 0..9e15, optional): the number handed out is above it
-- Reply: {'obtained', fencing number, ttl ms} | {'held', the holder's value, its remaining ms}
-- Bad arguments: an error reply, nothing written.

local owner, ttl, floor = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3] or '0')
-- tonumber also reads 'inf' and '1e20', which SET PX refuses: after the INCR, that would
-- burn a fencing number on a refused call.
if not owner or owner == '' or not ttl or ttl < 1 or ttl > 1e13 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR lock_obtain: bad owner or ttl')
end
if not floor or floor < 0 or floor > 9e15 or floor ~= math.floor(floor) then
  return redis.error_reply('ERR lock_obtain: bad floor')
end
local holder = redis.call('GET', KEYS[1])
if holder then
  return {'held', holder, redis.call('PTTL', KEYS[1])}
end
-- Redis can lose the counter (a flush, a restart without persistence) while the holders'
-- writes (Postgres) remember their numbers: the caller passes the largest it has seen as the
-- floor, so a new holder is never refused as "older" by its predecessors' records.
local fence = redis.call('INCR', KEYS[2])
if fence <= floor then
  fence = floor + 1
  redis.call('SET', KEYS[2], fence)
end
redis.call('SET', KEYS[1], owner, 'PX', ttl)
return {'obtained', fence, ttl}
