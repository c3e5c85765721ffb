-- refund_order.lua: a paid order's payment refunded or disputed, in one step with its outbox
-- event. (release.lua and changed.lua are prepended.) The provider's charge.refunded and an
-- admin's refund both end here; whichever comes first makes the order refunded, the other
-- finds it refunded and writes nothing, so order.refunded is published once per order.
--
-- Go caller: orders.Store.refundOrder (internal/orders/refunds.go).
-- KEYS[1] item hash   KEYS[2] orders hash   KEYS[3] held hash   KEYS[4] paidby hash
-- KEYS[5] shard outbox stream   KEYS[6] shard change log   KEYS[7] shard clock
-- KEYS[8] item payments hash (order id -> "payment id|state|event id|attempt")
-- KEYS[9] item refunds hash (order id -> "idempotency key|restock": an admin's refund)
-- ARGV[1] item id   ARGV[2] order id
-- ARGV[3] payment id: the session the event is about ('' for an admin's refund: the order's own)
-- ARGV[4] mode:
--   request  an admin asks for a full refund under ARGV[7] with restock ARGV[6] (0|1), before the
--            provider is asked: recorded in KEYS[9] (the first request's restock is the one kept)
--   withdraw the provider refused the admin's refund: the request of key ARGV[7] is forgotten
--   full     the provider refunded the payment in full (ARGV[5] cents): the order becomes refunded,
--            restocked as a recorded request asked (order.refunded, delta = units restocked)
--   partial  the provider refunded ARGV[5] cents of it so far (payment.refunded with the amount)
--   dispute  the charge is disputed: the record's state becomes disputed (payment.disputed)
-- ARGV[5] refunded cents so far (full, partial)   ARGV[6] restock (request)
-- ARGV[7] the admin's Idempotency-Key (request, withdraw)   ARGV[8] the PaymentIntent ('' if unknown)
--
-- Reply: {outcome, packed_order[, sold, seq]}
--   outcome: refunded (this call made the order refunded) | requested (request recorded or seen)
--            | recorded (partial, dispute, withdraw: applied) | duplicate (applied before: the
--            order is refunded, the dispute recorded, or the request is another key's after the
--            refund) | not_found (no such order, or the payment is not its payment)
--            | invalid_state (not paid, or its payment was never this order's settlement)
--   packed_order: the order after the call ('' for not_found)
--   sold, seq (outcome refunded only): the item's units for the best-sellers board, which no
--   longer count this order's, and that figure's number (see best_sellers in release.lua)
-- A malformed argument is an error reply and writes nothing.

local item_id, oid, pid, mode = ARGV[1], ARGV[2], ARGV[3] or '', ARGV[4]
local cents = tonumber(ARGV[5] or '')
local restock, key, pi = ARGV[6] or '0', ARGV[7] or '', ARGV[8] or ''
if not item_id or item_id == '' or not oid or string.sub(oid, 1, #item_id + 1) ~= item_id .. '.'
    or string.find(pid .. key .. pi, '|', 1, true)
    or (mode ~= 'request' and mode ~= 'withdraw' and mode ~= 'full' and mode ~= 'partial' and mode ~= 'dispute')
    or ((mode == 'full' or mode == 'partial') and (not cents or cents < 0 or cents ~= math.floor(cents)))
    or ((mode == 'request' or mode == 'withdraw') and key == '')
    or (restock ~= '0' and restock ~= '1') then
  return redis.error_reply('ERR refund_order: bad item, order, payment, mode, amount, restock or key')
end

local packed = redis.call('HGET', KEYS[2], oid)
local o = unpack_order(packed)
if not o then
  return {'not_found', ''}
end
local rec = redis.call('HGET', KEYS[8], oid)
if not rec then
  if mode == 'request' or mode == 'withdraw' then
    return {'invalid_state', packed}
  end
  return {'not_found', ''}
end
local rpid, state, evt, att = string.match(rec, '^([^|]*)|([^|]*)|([^|]*)|?(.*)$')
if not rpid or (pid ~= '' and rpid ~= pid) then
  return {'not_found', ''}
end
pid = rpid

if mode == 'withdraw' then
  local req = redis.call('HGET', KEYS[9], oid)
  if req and string.match(req, '^(.*)|[01]$') == key and o.status == 'paid' then
    redis.call('HDEL', KEYS[9], oid)
  end
  return {'recorded', packed}
end

if mode == 'request' then
  if o.status == 'refunded' then
    local req = redis.call('HGET', KEYS[9], oid)
    if req and string.match(req, '^(.*)|[01]$') == key then
      return {'duplicate', packed}
    end
    return {'invalid_state', packed}
  end
  if o.status ~= 'paid' or (state ~= 'paid' and state ~= 'disputed') then
    return {'invalid_state', packed}
  end
  redis.call('HSETNX', KEYS[9], oid, key .. '|' .. restock)
  return {'requested', packed}
end

-- The provider's word. A refund of a payment the shop refunded itself because it could not pay
-- its order (refunding, refunded while the order is not refunded) is that refund's own echo.
if state ~= 'paid' and state ~= 'disputed' then
  return {'duplicate', packed}
end
if o.status == 'refunded' then
  return {'duplicate', packed}
end
if o.status ~= 'paid' then
  return {'invalid_state', packed}
end
local now = now_int_ms()

if mode == 'dispute' then
  if state == 'disputed' then
    return {'duplicate', packed}
  end
  redis.call('HSET', KEYS[8], oid, pid .. '|disputed|' .. evt .. '|' .. att)
  redis.call('XADD', KEYS[5], '*', 'type', 'payment.disputed', 'at', now, 'item', item_id,
    'order', oid, 'user', o.user, 'quantity', o.qty, 'price_cents', o.price, 'payment', pid,
    'payment_intent', pi)
  return {'recorded', packed}
end

if mode == 'partial' then
  redis.call('XADD', KEYS[5], '*', 'type', 'payment.refunded', 'at', now, 'item', item_id,
    'order', oid, 'user', o.user, 'quantity', o.qty, 'price_cents', o.price, 'payment', pid,
    'payment_intent', pi, 'refunded_cents', string.format('%d', cents))
  return {'recorded', packed}
end

-- full
local back = 0
local req = redis.call('HGET', KEYS[9], oid)
if req and string.sub(req, -1) == '1' then
  back = o.qty
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- A restore is rebuilding the item: its figures would overwrite this restock or count, and
  -- a write now would create a partial item hash.
  return redis.error_reply('ERR refund_order: the item is being restored; try again')
end
local next_packed = pack_order(o, 'refunded')
redis.call('HSET', KEYS[2], oid, next_packed)
redis.call('HSET', KEYS[8], oid, pid .. '|refunded|' .. evt .. '|' .. att)
if redis.call('HINCRBY', KEYS[4], o.user, -o.qty) <= 0 then
  redis.call('HDEL', KEYS[4], o.user)
end
if back > 0 then
  -- Restocked: the units are on sale again and the buyer's allowance comes back. Without
  -- restock they stay sold (counted in paid) and count against the allowance.
  if redis.call('HINCRBY', KEYS[3], o.user, -back) <= 0 then
    redis.call('HDEL', KEYS[3], o.user)
  end
  redis.call('HINCRBY', KEYS[1], 'stock_left', back)
  redis.call('HINCRBY', KEYS[1], 'paid', -back)
  redis.call('HINCRBY', KEYS[1], 'version', 1)
  mark_changed(KEYS[6], KEYS[7], item_id)
end
if back < o.qty then
  -- Units that stay sold: counted in paid, but no longer on the best-sellers board.
  redis.call('HINCRBY', KEYS[1], 'refunded_kept', o.qty - back)
end
local sold, seq = best_sellers(KEYS[1])
local ev = {'type', 'order.refunded', 'at', now, 'item', item_id, 'order', oid, 'user', o.user,
  'quantity', o.qty, 'price_cents', o.price, 'payment', pid, 'refunded_cents', string.format('%d', cents)}
if pi ~= '' then
  ev[#ev + 1], ev[#ev + 2] = 'payment_intent', pi
end
if back > 0 then
  ev[#ev + 1], ev[#ev + 2] = 'delta', back -- omitted when the units stay sold
end
redis.call('XADD', KEYS[5], '*', unpack(ev))
return {'refunded', next_packed, sold, seq}
