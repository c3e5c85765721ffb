-- attach_payment.lua: attach the provider's payment to a reserved order, once. Checkout
-- creates the payment at the provider first (Idempotency-Key checkout-<order id>, so asking
-- again gives the same payment), then this script records it in the item's slot beside the
-- order: the order's status is checked and the payment written in one step, so a payment is
-- only ever attached to an order that was reserved and not yet due, and an order has at most
-- one payment (a second, different payment id is not attached: the first is answered).
--
-- KEYS[1] orders hash   KEYS[2] payments hash (order id -> "payment id|state|event id")
-- ARGV[1] item id   ARGV[2] order id   ARGV[3] user id (the caller)   ARGV[4] payment id
--
-- Reply: {outcome, packed_order, payment_id}
--   outcome: attached (payment_id: the order's payment, this one or the one attached before)
--            | not_found (no such order, or another user's)
--            | order_expired (the reservation's time ran out) | invalid_state (not reserved)
--   packed_order: the order ('' for not_found)   payment_id: '' unless attached
-- A malformed argument is an error reply and writes nothing.

local item_id, oid, user, pid = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if not item_id or item_id == '' or not user or user == '' or not oid or not pid or pid == ''
    or string.sub(oid, 1, #item_id + 1) ~= item_id .. '.' or string.find(pid, '|', 1, true) then
  return redis.error_reply('ERR attach_payment: bad item, order, user or payment id')
end

local packed = redis.call('HGET', KEYS[1], oid)
local o = unpack_order(packed)
if not o or o.user ~= user then
  return {'not_found', '', ''}
end
if o.status == 'expired' then
  return {'order_expired', packed, ''}
end
if o.status ~= 'reserved' then
  return {'invalid_state', packed, ''}
end
if now_int_ms() >= o.expires then
  return {'order_expired', packed, ''}
end
local rec = redis.call('HGET', KEYS[2], oid)
if rec then
  return {'attached', packed, string.match(rec, '^([^|]*)')}
end
redis.call('HSET', KEYS[2], oid, pid .. '|open|')
return {'attached', packed, pid}
