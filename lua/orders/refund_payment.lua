-- refund_payment.lua: record that the provider refunded a payment pay.lua marked refunding (it
-- succeeded for an order already expired or cancelled). One script so the record moves
-- refunding -> refunded once, with payment.refunded: a repeated call (the webhook again, a retry
-- after a lost reply) writes nothing. (release.lua is prepended.)
-- Go caller: orders.Store.FinishRefund (internal/orders/payments.go).
-- KEYS[1] orders hash  [2] payments hash  [3] shard outbox stream
-- ARGV[1] item id  [2] order id  [3] payment id
-- Reply: 1 when this call recorded the refund, 0 when the payment is not refunding (already
-- refunded, or not this order's). A malformed argument is an error reply and writes nothing.

local item_id, oid, pid = ARGV[1], ARGV[2], ARGV[3]
if not item_id or item_id == '' or not oid or not pid or pid == ''
    or string.sub(oid, 1, #item_id + 1) ~= item_id .. '.' then
  return redis.error_reply('ERR refund_payment: bad item, order or payment id')
end
local rec = redis.call('HGET', KEYS[2], oid)
if not rec then
  return 0
end
local rpid, state, evt = string.match(rec, '^([^|]*)|([^|]*)|(.*)$')
if rpid ~= pid or state ~= 'refunding' then
  return 0
end
local o = unpack_order(redis.call('HGET', KEYS[1], oid))
if not o then
  return 0
end
redis.call('HSET', KEYS[2], oid, pid .. '|refunded|' .. evt)
redis.call('XADD', KEYS[3], '*', 'type', 'payment.refunded', 'at', now_int_ms(), 'item', item_id,
  'order', oid, 'user', o.user, 'quantity', o.qty, 'price_cents', o.price, 'payment', pid)
return 1
