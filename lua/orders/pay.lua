-- pay.lua: pay one reserved order. One script, in the item's slot like purchase.lua and
-- expire.lua, so a payment and an expiry of one order are serialised: it ends paid or expired,
-- and stock a late payment held is never sold twice. (release.lua and changed.lua are prepended.)
-- Go callers: orders.Store.Pay (internal/orders/lifecycle.go: the shopper's own pay) and
--   orders.Store.SettlePayment (internal/orders/payments.go: a provider's success).
-- KEYS[1] item hash  [2] orders hash  [3] held hash  [4] paidby hash  [5] shard expiry zset
--   [6] shard outbox stream  [7] shard change log  [8] shard clock
--   [9] item payments hash (order id -> "payment id|state|event id|attempt")
-- ARGV[1] item id  [2] order id  [3] user id (the caller; '' with a payment id)
--   [4] payment id ('' for the shopper's own pay)  [5] the provider's event id ('' none)
--   [6] processing hold, whole ms 0..1e13 ('' or 0: none)  [7] amount paid in cents ('' unchecked)
--   [8] the provider's PaymentIntent ('' unknown)
-- Reply: {outcome, packed_order ('' for not_found), the item's paid units after the call}, and
--   for paid two more: the best-sellers units and their number (best_sellers in release.lua).
--   outcome: paid | not_found (no such order, another user's, or not this order's payment)
--   | order_expired (it is, or now became, expired) | invalid_state (paid or cancelled)
--   with a payment id also: refund (not payable: the payment is, or already was, marked
--   refunding) | duplicate (the payment settled before)
-- A malformed argument, or a missing item hash (a restore), is an error reply; nothing written.

local item_id, oid, user = ARGV[1], ARGV[2], ARGV[3] or ''
local pid, evt = ARGV[4] or '', ARGV[5] or ''
local hold = 0
if ARGV[6] and ARGV[6] ~= '' then
  hold = tonumber(ARGV[6])
end
if not hold or hold < 0 or hold > 1e13 or hold ~= math.floor(hold) then
  return redis.error_reply('ERR pay: hold must be a whole number of ms, 0..1e13')
end
local pi = ARGV[8] or ''
if string.find(pi, '|', 1, true) then
  return redis.error_reply('ERR pay: bad payment intent')
end
local amount = nil
if ARGV[7] and ARGV[7] ~= '' then
  amount = tonumber(ARGV[7])
  if not amount or amount < 0 or amount > 1e15 or amount ~= math.floor(amount) then
    return redis.error_reply('ERR pay: amount must be a whole number of cents, 0..1e15')
  end
end
if not item_id or item_id == '' or not oid or (user == '' and pid == '')
    or string.sub(oid, 1, #item_id + 1) ~= item_id .. '.' or string.find(pid .. evt, '|', 1, true) then
  return redis.error_reply('ERR pay: bad item, order, user, payment or event id')
end

local packed = redis.call('HGET', KEYS[2], oid)
local o = unpack_order(packed)
local state = nil
local att = ''
-- With a payment id, it must be the one checkout attached to the order, whose user is the payer.
if o and pid ~= '' then
  local rec = redis.call('HGET', KEYS[9], oid)
  local rpid
  if rec then
    rpid, state = string.match(rec, '^([^|]*)|([^|]*)')
    att = string.match(rec, '^[^|]*|[^|]*|[^|]*|(.*)$') or ''
  end
  if rpid ~= pid then
    return {'not_found', '', 0}
  end
  user = o.user
end
if not o or o.user ~= user then
  return {'not_found', '', 0}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- A restore is rebuilding the item (restore_begin.lua): HINCRBY would create a partial item
  -- hash that restore_finish.lua then overwrites with figures counting this order reserved.
  return redis.error_reply('ERR pay: the item is being restored; try again')
end
local paid = tonumber(redis.call('HGET', KEYS[1], 'paid')) or 0
-- The payment's record moves from open, processing, failed or canceled to paid or refunding in
-- the same step as the order, so however often and in whatever order the provider delivers the
-- event, the payment settles once: it pays the order, or it is to be refunded (refund_payment.lua).
if state == 'paid' or state == 'refunded' or state == 'disputed' then
  return {'duplicate', packed, paid}
end
if state == 'refunding' then
  return {'refund', packed, paid}
end
if pid ~= '' and state ~= 'open' and state ~= 'processing' and state ~= 'failed' and state ~= 'canceled' then
  return redis.error_reply('ERR pay: payment record of ' .. oid .. ' is malformed')
end
local refund = pid .. '|refunding|' .. evt .. '|' .. att
if pid ~= '' and amount and amount ~= o.qty * tonumber(o.price) then
  -- Not the order's price (negative: another currency): it pays nothing; the money goes back.
  redis.call('HSET', KEYS[9], oid, refund)
  return {'refund', packed, paid}
end
if o.status == 'expired' then
  if pid ~= '' then
    redis.call('HSET', KEYS[9], oid, refund)
    return {'refund', packed, paid}
  end
  return {'order_expired', packed, paid}
end
if o.status ~= 'reserved' then
  if pid ~= '' then
    redis.call('HSET', KEYS[9], oid, refund)
    return {'refund', packed, paid}
  end
  return {'invalid_state', packed, paid}
end

local now = now_int_ms()
local ends = o.expires
if state == 'processing' then
  ends = o.expires + hold -- a debit on its way still pays until the hold ends (see expire.lua)
end
-- Past its time the order expires right here, whether or not the expirer reached it: the answer
-- depends only on Redis TIME, never on the expirer's schedule.
if now >= ends then
  release_order(KEYS[2], KEYS[3], KEYS[6], item_id, oid, o, 'expired', now)
  -- Removes only the order's own entry (a restore's); a batch entry stays until it falls due,
  -- when expire.lua skips this settled order.
  redis.call('ZREM', KEYS[5], oid)
  redis.call('HINCRBY', KEYS[1], 'stock_left', o.qty)
  redis.call('HINCRBY', KEYS[1], 'reserved', -o.qty)
  redis.call('HINCRBY', KEYS[1], 'version', 1)
  mark_changed(KEYS[7], KEYS[8], item_id)
  if pid ~= '' then
    redis.call('HSET', KEYS[9], oid, refund)
    return {'refund', pack_order(o, 'expired'), paid}
  end
  return {'order_expired', pack_order(o, 'expired'), paid}
end

local next_packed = pack_order(o, 'paid')
redis.call('HSET', KEYS[2], oid, next_packed)
redis.call('HINCRBY', KEYS[4], user, o.qty)
redis.call('ZREM', KEYS[5], oid)
redis.call('HINCRBY', KEYS[1], 'reserved', -o.qty)
paid = redis.call('HINCRBY', KEYS[1], 'paid', o.qty)
redis.call('HINCRBY', KEYS[1], 'version', 1)
mark_changed(KEYS[7], KEYS[8], item_id)
if pid ~= '' then
  redis.call('HSET', KEYS[9], oid, pid .. '|paid|' .. evt .. '|' .. att)
  local ev = {'type', 'order.paid', 'at', now, 'item', item_id, 'order', oid, 'user', user,
    'quantity', o.qty, 'price_cents', o.price, 'payment', pid}
  -- The PaymentIntent and the attempt ride on order.paid, so the record keeps both.
  if pi ~= '' then
    ev[#ev + 1], ev[#ev + 2] = 'payment_intent', pi
  end
  if att ~= '' then
    ev[#ev + 1], ev[#ev + 2] = 'attempt', att
  end
  redis.call('XADD', KEYS[6], '*', unpack(ev))
else
  redis.call('XADD', KEYS[6], '*', 'type', 'order.paid', 'at', now, 'item', item_id,
    'order', oid, 'user', user, 'quantity', o.qty, 'price_cents', o.price)
end
local sold, seq = best_sellers(KEYS[1])
return {'paid', next_packed, paid, sold, seq}
