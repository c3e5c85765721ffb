-- refund_order.lua: a paid order's payment refunded or disputed, with its outbox event. One
-- script, so whichever of the provider's charge.refunded and an admin's refund comes first makes
-- the order refunded and the other writes nothing: order.refunded once per order
-- (docs/payments.md, "Refunds and disputes"). (release.lua and changed.lua are prepended.)
-- Go caller: orders.Store.refundOrder (internal/orders/refunds.go).
-- KEYS[1] item hash  [2] orders hash  [3] held hash  [4] paidby hash  [5] shard outbox stream
--   [6] shard change log  [7] shard clock
--   [8] item payments hash (order id -> "payment id|state|event id|attempt")
--   [9] item refunds hash (order id -> "idempotency key|restock": an admin's request)
-- ARGV[1] item id  [2] order id
--   [3] payment id the event is about ('' for an admin's refund: the order's own)
--   [4] mode: request | withdraw (an admin's refund) | full | partial | dispute (the provider)
--   [5] refunded cents so far (full, partial)  [6] restock 0|1 (request)
--   [7] the admin's Idempotency-Key (request, withdraw)  [8] the PaymentIntent ('' unknown)
-- Reply: {outcome, packed_order ('' for not_found)[, sold, seq]}; outcome:
--   refunded (this call made the order refunded; sold, seq: the best-sellers units, which no
--   longer count it, and their number: best_sellers in release.lua) | requested (recorded or
--   seen) | recorded (partial, dispute, withdraw applied) | duplicate (applied before, or
--   another key's request after the refund) | not_found (no such order, or not its payment)
--   | invalid_state (not paid, or its payment was never this order's settlement)
-- A malformed argument is an error reply and writes nothing.

local item_id, oid, pid, mode = ARGV[1], ARGV[2], ARGV[3] or '', ARGV[4]
local cents = tonumber(ARGV[5] or '')
local restock, key, pi = ARGV[6] or '0', ARGV[7] or '', ARGV[8] or ''
if not item_id or item_id == '' or not oid or string.sub(oid, 1, #item_id + 1) ~= item_id .. '.'
    or string.find(pid .. key .. pi, '|', 1, true)
    or (mode ~= 'request' and mode ~= 'withdraw' and mode ~= 'full' and mode ~= 'partial' and mode ~= 'dispute')
    or ((mode == 'full' or mode == 'partial') and (not cents or cents < 0 or cents > 1e15 or cents ~= math.floor(cents)))
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

-- withdraw: the provider refused the admin's refund; the request of this key is forgotten.
if mode == 'withdraw' then
  local req = redis.call('HGET', KEYS[9], oid)
  if req and string.match(req, '^(.*)|[01]$') == key and o.status == 'paid' then
    redis.call('HDEL', KEYS[9], oid)
  end
  return {'recorded', packed}
end

-- request: an admin's full refund, recorded before the provider is asked; the first
-- request's restock is the one kept.
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

-- dispute: the record's state becomes disputed (payment.disputed).
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

-- partial: refunded in part so far; the order stays paid (payment.refunded with the amount).
if mode == 'partial' then
  redis.call('XADD', KEYS[5], '*', 'type', 'payment.refunded', 'at', now, 'item', item_id,
    'order', oid, 'user', o.user, 'quantity', o.qty, 'price_cents', o.price, 'payment', pid,
    'payment_intent', pi, 'refunded_cents', string.format('%d', cents))
  return {'recorded', packed}
end

-- full: the order becomes refunded, restocked as a recorded request asked (order.refunded,
-- delta = the units restocked).
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
