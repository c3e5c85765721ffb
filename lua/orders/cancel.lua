-- cancel.lua: cancel one reserved order. One script, in the item's slot, so stock, allowance,
-- status and order.cancelled change together: a cancel racing a payment or an expiry leaves the
-- order in exactly one terminal state. (release.lua and changed.lua are prepended.)
-- Go caller: orders.Store.Cancel (internal/orders/lifecycle.go).
-- KEYS[1] item hash  [2] orders hash  [3] held hash  [4] expiry zset  [5] shard outbox stream
--   [6] shard change log  [7] shard clock  [8] item payments hash
-- ARGV[1] item id  [2] order id  [3] user id (the caller)
-- Reply: {outcome, packed_order after the call ('' for not_found)}; outcome: cancelled
--   | not_found (no such order, or another user's) | invalid_state (not reserved, or its time
--   ran out: expired here, order.expired) | payment_processing (nothing changed)
-- A malformed argument, or a missing item hash (a restore), is an error reply; nothing written.

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
-- A debit on its way: the provider decides, or the money is taken for a cancelled order.
local rec = redis.call('HGET', KEYS[8], oid)
if rec and string.match(rec, '^[^|]*|processing|') then
  return {'payment_processing', packed}
end

local now = now_int_ms()
local status = 'cancelled'
-- Past expires_ms the order's fate is expired, whoever reaches it first (as in pay.lua).
if now >= o.expires then
  status = 'expired'
end
release_order(KEYS[2], KEYS[3], KEYS[5], item_id, oid, o, status, now)
-- Removes only a single-order entry (a restore's); a batch entry stays until it falls due,
-- when expire.lua skips this settled order.
redis.call('ZREM', KEYS[4], oid)
redis.call('HINCRBY', KEYS[1], 'stock_left', o.qty)
redis.call('HINCRBY', KEYS[1], 'reserved', -o.qty)
redis.call('HINCRBY', KEYS[1], 'version', 1)
mark_changed(KEYS[6], KEYS[7], item_id)
if status == 'expired' then
  return {'invalid_state', pack_order(o, status)}
end
return {'cancelled', pack_order(o, status)}
