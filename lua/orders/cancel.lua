-- cancel.lua: cancel one reserved order, atomically with its outbox event. (release.lua and
-- changed.lua are prepended.) Stock, the user's per-user allowance, the order's own expiry entry
-- (a restore's single-order entry; a purchase batch's entry stays until it falls due, when
-- expire.lua skips this settled order) and the order's status
-- change together or not at all, in the item's slot, so a cancel racing a payment or an expiry
-- leaves the order in exactly one terminal state. A reservation whose time already ran out is
-- expired here (order.expired) and refused, like pay.lua does: after expires_ms an order's fate
-- is `expired` whichever of the expirer or the shopper reaches it first.
--
-- An order whose payment is processing (a debit on its way, KEYS[8]) is not cancelled: the
-- provider decides it (the money would otherwise be taken for a cancelled order).
--
-- Go caller: orders.Store.Cancel (internal/orders/lifecycle.go).
-- KEYS[1] item hash   KEYS[2] orders hash   KEYS[3] held hash   KEYS[4] expiry zset
-- KEYS[5] shard outbox stream   KEYS[6] shard change log   KEYS[7] shard clock
-- KEYS[8] item payments hash
-- ARGV[1] item id   ARGV[2] order id   ARGV[3] user id (the caller)
--
-- Reply: {outcome, packed_order}
--   outcome: cancelled | not_found (no such order, or another user's)
--            | invalid_state (not reserved, or its time ran out: the order is now expired)
--            | payment_processing (its payment is processing: nothing changed)
--   packed_order: the order after the call ('' for not_found)
-- A malformed argument, or an order whose item hash is missing (a restore is rebuilding the
-- item), is an error reply and writes nothing.

local item_id, oid, user = ARGV[1], ARGV[2], ARGV[3]
if not item_id or item_id == '' or not user or user == '' or not oid
    or string.sub(oid, 1, #item_id + 1) ~= item_id .. '.' then
  return redis.error_reply('ERR cancel: bad item, order or user id')
end

local packed = redis.call('HGET', KEYS[2], oid)
local o = unpack_order(packed)
if not o or o.user ~= user then
  return {'not_found', ''}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- A restore is rebuilding the item: see pay.lua.
  return redis.error_reply('ERR cancel: the item is being restored; try again')
end
if o.status ~= 'reserved' then
  return {'invalid_state', packed}
end
local rec = redis.call('HGET', KEYS[8], oid)
if rec and string.match(rec, '^[^|]*|processing|') then
  return {'payment_processing', packed}
end

local now = now_int_ms()
local status = 'cancelled'
if now >= o.expires then
  status = 'expired'
end
release_order(KEYS[2], KEYS[3], KEYS[5], item_id, oid, o, status, now)
redis.call('ZREM', KEYS[4], oid)
redis.call('HINCRBY', KEYS[1], 'stock_left', o.qty)
redis.call('HINCRBY', KEYS[1], 'reserved', -o.qty)
redis.call('HINCRBY', KEYS[1], 'version', 1)
mark_changed(KEYS[6], KEYS[7], item_id)
if status == 'expired' then
  return {'invalid_state', pack_order(o, status)}
end
return {'cancelled', pack_order(o, status)}
