-- reconcile/reemit.lua: append again, to the item's outbox stream, the events that bring the
-- Postgres record up to Redis for one order or for the item (batch repair). They travel the
-- normal path, so the consumer's rules hold (an event id applies once, status only moves
-- forward, item attributes follow the newest stream position). One script so the events are
-- built from Redis's state as they are appended, only for an order still in the status the
-- batch confirmed as drift, and fenced like restore on the item's restore fence.
-- Go caller: reconcile.Reconciler.repair (internal/reconcile/repair.go).
-- KEYS[1] item hash  [2] orders hash  [3] outbox stream  [4] item's restore fence
-- ARGV[1] item id  [2] mode  [3] order id ('' for mode item)
--   [4] the order's status the batch confirmed (modes order and final)
--   [5] the batch's fencing number (integer 1..2^53 - 1)
--   mode order: order.reserved (at = its creation) then, if final, order.<status>
--   mode final: only order.<status> of a final order
--   mode item:  item.upserted with the item's attributes and stock_total
-- Reply: {'reemitted', number of entries appended} | {'not_found', 0} | {'reserved', 0} (mode
--   final on an order still reserved) | {'changed', 0} (the order's status is no longer
--   ARGV[4]: nothing sent) | {'fenced', the newer fencing number stored}
-- Bad arguments: an error reply, nothing written.

local item, mode, oid, expected, fence = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
if not item or item == '' or (mode ~= 'order' and mode ~= 'final' and mode ~= 'item') then
  return redis.error_reply('ERR reconcile_reemit: bad item or mode')
end
if mode ~= 'item' and (not oid or string.sub(oid, 1, #item + 1) ~= item .. '.') then
  return redis.error_reply('ERR reconcile_reemit: bad order id')
end
if mode ~= 'item' and (not expected or expected == '') then
  return redis.error_reply('ERR reconcile_reemit: missing confirmed status')
end
-- tonumber also reads 'inf' and '1e300': stored, either would refuse every later batch and
-- restore of the item. Fencing numbers come from lock/obtain.lua, exact integers below 2^53.
if not fence or not (fence >= 1 and fence <= 9007199254740991) or fence ~= math.floor(fence) then
  return redis.error_reply('ERR reconcile_reemit: bad fencing number')
end
local stored = tonumber(redis.call('GET', KEYS[4]) or '0')
-- A batch that stalled past its lock re-emits nothing once a newer batch or restore wrote the
-- item (a newer batch re-emits the same events itself).
if stored > fence then
  return {'fenced', stored}
end
redis.call('SET', KEYS[4], fence)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

if mode == 'item' then
  local f = redis.call('HMGET', KEYS[1], 'name', 'category', 'price_cents', 'stock_total',
    'per_user_limit', 'starts_at', 'ends_at', 'image_url')
  if not f[1] or not f[4] then
    return {'not_found', 0}
  end
  redis.call('XADD', KEYS[3], '*', 'type', 'item.upserted', 'at', now, 'item', item,
    'name', f[1], 'category', f[2] or '', 'price_cents', f[3] or '0', 'stock_total', f[4],
    'per_user_limit', f[5] or '1', 'starts_at', f[6] or '0', 'ends_at', f[7] or '0', 'image_url', f[8] or '')
  return {'reemitted', 1}
end

local packed = redis.call('HGET', KEYS[2], oid)
if not packed then
  return {'not_found', 0}
end
local user, qty, price, status, created, expires =
  string.match(packed, '^([^|]*)|(%d+)|(%d+)|(%a+)|(%d+)|(%d+)$')
if not user then
  return {'not_found', 0}
end
-- Changed since the batch confirmed it: its own event is on the way, and a re-emission beside
-- it would record the change twice (two stock returns of one cancelled order).
if status ~= expected then
  return {'changed', 0}
end
local n = 0
if mode == 'order' then
  -- With its own expiry, as purchase.lua wrote it, so a restore from the record keeps it.
  redis.call('XADD', KEYS[3], '*', 'type', 'order.reserved', 'at', created, 'item', item,
    'order', oid, 'user', user, 'quantity', qty, 'price_cents', price, 'expires', expires)
  n = 1
elseif status == 'reserved' then
  return {'reserved', 0}
end
if status ~= 'reserved' then
  redis.call('XADD', KEYS[3], '*', 'type', 'order.' .. status, 'at', now, 'item', item,
    'order', oid, 'user', user, 'quantity', qty, 'price_cents', price)
  n = n + 1
end
return {'reemitted', n}
