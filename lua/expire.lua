-- expire.lua: expire up to `batch` due reservations of ONE item. (release.lua is prepended.)
-- Claiming an entry, re-checking its order, returning its stock and allowance, appending
-- order.expired and removing the entry all happen in this one script, so a crashed expirer
-- loses nothing and several expirers (one per api instance) expire each order exactly once.
-- An entry whose order is no longer reserved (a payment or cancel won) is just removed.
-- The batch is bounded (1..1000) so one call holds Redis for milliseconds (a full 1000 took
-- ~8 ms, so FLASHSALE_EXPIRY_BATCH stops at 250); the caller repeats while a call comes back full.
--
-- KEYS[1] item hash   KEYS[2] orders hash   KEYS[3] held hash   KEYS[4] expiry zset
-- KEYS[5] outbox stream
-- ARGV[1] item id   ARGV[2] batch size (integer 1..1000)
--
-- Reply: {examined, expired, units_returned}
--   examined: due entries taken off the index (== batch means more may be due; 0 while the
--   item hash is missing, as during a restore: nothing is written then)
--   expired: orders moved reserved -> expired   units_returned: their summed quantity
-- A malformed argument is an error reply and writes nothing.

local item_id = ARGV[1]
local batch = tonumber(ARGV[2])
if not item_id or item_id == '' then
  return redis.error_reply('ERR expire: missing item id')
end
if not batch or batch < 1 or batch > 1000 or batch ~= math.floor(batch) then
  return redis.error_reply('ERR expire: batch must be an integer in 1..1000')
end

local now = now_int_ms()
local ids = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, batch)
if #ids == 0 then
  return {0, 0, 0}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- A restore is rebuilding the item (restore_begin.lua .. restore_finish.lua): writing now
  -- would create a partial item hash that the restore then overwrites with figures counting
  -- these orders reserved. The entries stay due; a later sweep expires them.
  return {0, 0, 0}
end

local expired, units = 0, 0
for _, oid in ipairs(ids) do
  local o = unpack_order(redis.call('HGET', KEYS[2], oid))
  if o and o.status == 'reserved' then
    units = units + release_order(KEYS[2], KEYS[3], KEYS[5], item_id, oid, o, 'expired', now)
    expired = expired + 1
  end
end
-- The ids are the index's first #ids members (ascending score, all <= now), so removing ranks
-- 0..#ids-1 removes exactly them without unpacking a long argument list.
redis.call('ZREMRANGEBYRANK', KEYS[4], 0, #ids - 1)
if expired > 0 then
  redis.call('HINCRBY', KEYS[1], 'stock_left', units)
  redis.call('HINCRBY', KEYS[1], 'reserved', -units)
  redis.call('HINCRBY', KEYS[1], 'version', 1)
end
return {#ids, expired, units}
