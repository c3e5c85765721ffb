-- payment_status.lua: record what the provider last said of an order's unsettled session:
-- open, processing (a debit on its way: the reservation is held, see expire.lua), failed
-- (the last try declined) or canceled (the session expired). One script so only this
-- session's record in one of those states moves: a late or repeated event never undoes a
-- settlement or touches another attempt's record. (release.lua is prepended.)
-- Go caller: orders.Store.SetPaymentStatus (internal/orders/payments.go).
-- KEYS[1] payments hash (order id -> "payment id|state|event id|attempt")  [2] orders hash
--   [3] shard expiry zset
-- ARGV[1] item id  [2] order id  [3] payment id (the session)
--   [4] status: open | processing | failed | canceled
-- Reply: 1 when the record changed, 0 when not (another session's, settled, or the same).
-- A malformed argument is an error reply and writes nothing.

local item_id, oid, pid, status = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if not item_id or item_id == '' or not oid or not pid or pid == ''
    or string.sub(oid, 1, #item_id + 1) ~= item_id .. '.' or string.find(pid, '|', 1, true)
    or (status ~= 'open' and status ~= 'processing' and status ~= 'failed' and status ~= 'canceled') then
  return redis.error_reply('ERR payment_status: bad item, order, payment id or status')
end
local rec = redis.call('HGET', KEYS[1], oid)
if not rec then
  return 0
end
local rpid, rstate, rest = string.match(rec, '^([^|]*)|([^|]*)|(.*)$')
if rpid ~= pid or rstate == status then
  return 0
end
if rstate ~= 'open' and rstate ~= 'processing' and rstate ~= 'failed' then
  return 0 -- settled, or the session ended (canceled is final)
end
-- A processing debit is decided by the provider: only its outcome (failed) moves it on.
if rstate == 'processing' and status ~= 'failed' then
  return 0
end
redis.call('HSET', KEYS[1], oid, pid .. '|' .. status .. '|' .. rest)
-- A failed debit ends the hold in the same step: an order past expires_ms that the hold kept
-- (its batch entry re-scored to the hold's end) gets its own entry, due at once.
if rstate == 'processing' then
  local o = unpack_order(redis.call('HGET', KEYS[2], oid))
  if o and o.status == 'reserved' and o.expires <= now_int_ms() then
    redis.call('ZADD', KEYS[3], o.expires, oid)
  end
end
return 1
