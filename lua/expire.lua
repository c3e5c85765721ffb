-- expire.lua: expire the given due reservations of ONE item. (release.lua and changed.lua are
-- prepended.) The expiry index is the item's shard's, shared with the shard's other items, so
-- the caller reads the due entries of the shard (ZRANGEBYSCORE, no script) and passes each
-- item's order ids here. Re-checking each entry's due time and its order, returning stock and
-- allowance, appending order.expired and removing the entry all happen in this one script, so
-- a crashed expirer loses nothing and several expirers (one per api instance) expire each
-- order exactly once. An entry whose order is no longer reserved (a payment or cancel won) is
-- just removed; an entry not due yet by Redis TIME (the caller's clock runs ahead) is left.
-- At most 1000 ids per call, so one call holds Redis for milliseconds.
--
-- KEYS[1] item hash   KEYS[2] orders hash   KEYS[3] held hash   KEYS[4] shard expiry zset
-- KEYS[5] shard outbox stream   KEYS[6] shard change log   KEYS[7] shard clock
-- ARGV[1] item id   ARGV[2..] order ids of this item (1..1000 of them)
--
-- Reply: {examined, expired, units_returned}
--   examined: of the given entries, those no longer in the index: taken off by this call or,
--   since the caller read them, by another (0 while the item hash is missing, as during a
--   restore: nothing is written then). The others are still there, at the index's head.
--   expired: orders moved reserved -> expired   units_returned: their summed quantity
-- A malformed argument is an error reply and writes nothing.

local item_id = ARGV[1]
local n = #ARGV - 1
if not item_id or item_id == '' then
  return redis.error_reply('ERR expire: missing item id')
end
if n < 1 or n > 1000 then
  return redis.error_reply('ERR expire: between 1 and 1000 order ids are needed')
end
local prefix = item_id .. '.'
for i = 2, #ARGV do
  if string.sub(ARGV[i], 1, #prefix) ~= prefix then
    return redis.error_reply('ERR expire: order id ' .. ARGV[i] .. ' is not of item ' .. item_id)
  end
end

if redis.call('EXISTS', KEYS[1]) == 0 then
  -- A restore is rebuilding the item (restore_begin.lua .. restore_finish.lua): writing now
  -- would create a partial item hash that the restore then overwrites with figures counting
  -- these orders reserved. The entries stay due; a later sweep expires them.
  return {0, 0, 0}
end

local now = now_int_ms()
local examined, expired, units = 0, 0, 0
for i = 2, #ARGV do
  local oid = ARGV[i]
  local due = tonumber(redis.call('ZSCORE', KEYS[4], oid))
  if not due then
    -- Another expirer (or a payment's cancel of the entry) took it off since the caller read it.
    examined = examined + 1
  elseif due <= now then
    local o = unpack_order(redis.call('HGET', KEYS[2], oid))
    if o and o.status == 'reserved' then
      units = units + release_order(KEYS[2], KEYS[3], KEYS[5], item_id, oid, o, 'expired', now)
      expired = expired + 1
    end
    redis.call('ZREM', KEYS[4], oid)
    examined = examined + 1
  end
end
if expired > 0 then
  redis.call('HINCRBY', KEYS[1], 'stock_left', units)
  redis.call('HINCRBY', KEYS[1], 'reserved', -units)
  redis.call('HINCRBY', KEYS[1], 'version', 1)
  mark_changed(KEYS[6], KEYS[7], item_id)
end
return {examined, expired, units}
