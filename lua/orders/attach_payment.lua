-- attach_payment.lua: one step of a checkout attempt on a reserved order (docs/payments.md,
-- "Checkout"). One script so each step is checked against the order and its payment record as
-- they are: an order has at most one attempt in force. (release.lua is prepended.)
-- Go caller: orders.Store.attempt (internal/orders/payments.go).
-- KEYS[1] orders hash  [2] payments hash (order id -> "payment id|state|event id|attempt")
--   [3] shard outbox stream
-- ARGV[1] item id  [2] order id  [3] user id (the caller)
--   [4] mode: begin | attach | abandon  [5] attempt id
--   [6] payment id (attach: the new session; begin: the ended session it replaces, '' none)
-- Reply: {outcome, packed_order ('' for not_found, abandoned), payment_id, attempt}; outcome:
--   creating (begin: this attempt, or an earlier one of unknown outcome; payment_id '')
--   | attached (the session in force: this one or another) | abandoned (the attempt's record
--   is gone, or was not this attempt's) | not_found (no such order, or another user's)
--   | order_expired (its time ran out) | invalid_state (not reserved)
-- A malformed argument is an error reply and writes nothing.

local item_id, oid, user, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local att, pid = ARGV[5] or '', ARGV[6] or ''
if not item_id or item_id == '' or not user or user == '' or not oid
    or string.sub(oid, 1, #item_id + 1) ~= item_id .. '.' or att == ''
    or string.find(pid .. att, '|', 1, true)
    or (mode ~= 'begin' and mode ~= 'attach' and mode ~= 'abandon')
    or (mode == 'attach' and pid == '') then
  return redis.error_reply('ERR attach_payment: bad item, order, user, mode, attempt or payment id')
end

local packed = redis.call('HGET', KEYS[1], oid)
local o = unpack_order(packed)
if not o or o.user ~= user then
  return {'not_found', '', '', ''}
end
local rec = redis.call('HGET', KEYS[2], oid)
local rpid, rstate, revt, ratt = '', '', '', ''
if rec then
  rpid, rstate, revt, ratt = string.match(rec, '^([^|]*)|([^|]*)|([^|]*)|?(.*)$')
end

if mode == 'abandon' then
  -- The provider refused the attempt's creation or answered 5xx: the next checkout makes a
  -- new attempt under a new key.
  if rec and rpid == '' and rstate == 'creating' and ratt == att then
    redis.call('HDEL', KEYS[2], oid)
  end
  return {'abandoned', '', '', ''}
end

if o.status == 'expired' then
  return {'order_expired', packed, '', ''}
end
if o.status ~= 'reserved' then
  return {'invalid_state', packed, '', ''}
end
if now_int_ms() >= o.expires then
  return {'order_expired', packed, '', ''}
end

-- begin: the attempt is recorded before the provider is asked, under an Idempotency-Key
-- derived from its id, so a retry after an unknown outcome asks again under the same key.
if mode == 'begin' then
  if rec and rpid == '' and rstate == 'creating' then
    return {'creating', packed, '', ratt}
  end
  -- A new attempt replaces only the named session, which the caller learned from the provider
  -- had ended (expired, or completed with a failed debit).
  local ended = rstate == 'open' or rstate == 'failed' or rstate == 'canceled'
  if rec and not (pid ~= '' and rpid == pid and ended) then
    return {'attached', packed, rpid, ratt}
  end
  redis.call('HSET', KEYS[2], oid, '|creating||' .. att)
  return {'creating', packed, '', att}
end

-- attach: payment.opened goes out in the same step, so the record keeps every attempt whose
-- session a shopper may pay (a restore brings it back; the money check knows it as this shop's).
if rec and rpid == '' and rstate == 'creating' and ratt == att then
  redis.call('HSET', KEYS[2], oid, pid .. '|open||' .. att)
  redis.call('XADD', KEYS[3], '*', 'type', 'payment.opened', 'at', now_int_ms(), 'item', item_id,
    'order', oid, 'user', o.user, 'quantity', o.qty, 'price_cents', o.price, 'payment', pid,
    'attempt', att)
  return {'attached', packed, pid, att}
end
return {'attached', packed, rpid, ratt}
