-- release.lua: a library, not a script, prepended to the orders scripts
-- (internal/orders/scripts.go), so "an order gives its stock and allowance back" has one
-- implementation and every way out of `reserved` writes the same things.

-- unpack_order reads a packed order, "user|quantity|price_cents|status|created_ms|expires_ms",
-- into {user, qty, price, status, created, expires} (qty and expires as numbers), or nil for a
-- missing or malformed record.
local function unpack_order(packed)
  if not packed then
    return nil
  end
  local user, qty, price, status, created, expires =
    string.match(packed, '^([^|]*)|(%d+)|(%d+)|(%a+)|(%d+)|(%d+)$')
  if not user then
    return nil
  end
  -- The numeric fields are kept as strings too, so packing writes back exactly what was read.
  return {user = user, qty = tonumber(qty), qty_s = qty, price = price, status = status,
    created = created, expires = tonumber(expires), expires_s = expires}
end

-- pack_order returns the packed record of order o with a new status.
local function pack_order(o, status)
  return o.user .. '|' .. o.qty_s .. '|' .. o.price .. '|' .. status .. '|' .. o.created .. '|' .. o.expires_s
end

-- now_int_ms returns Redis TIME as whole unix milliseconds.
local function now_int_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- best_sellers returns the item's units on the best-sellers board (paid, less the units of
-- refunded orders that stayed sold) and a new number for that figure, above any before it, so
-- the board can tell a late report (the figure goes down on a refund). Numbers start from Redis
-- TIME in microseconds when the item has none (new, or rebuilt by a restore).
local function best_sellers(k_item)
  local f = redis.call('HMGET', k_item, 'paid', 'refunded_kept', 'sold_seq')
  if not f[3] then
    local t = redis.call('TIME')
    redis.call('HSET', k_item, 'sold_seq', t[1] .. string.format('%06d', tonumber(t[2])))
  end
  local seq = redis.call('HINCRBY', k_item, 'sold_seq', 1)
  return (tonumber(f[1]) or 0) - (tonumber(f[2]) or 0), seq
end

-- release_order writes the order's new status (cancelled | expired), gives qty back to the
-- user's allowance and appends order.<status>; it returns qty. The caller moves qty from
-- reserved to stock_left, bumps version and removes the order's own expiry entry, if any
-- (expire.lua does those once per call).
local function release_order(k_orders, k_held, k_outbox, item_id, oid, o, status, now)
  redis.call('HSET', k_orders, oid, pack_order(o, status))
  if redis.call('HINCRBY', k_held, o.user, -o.qty) <= 0 then
    redis.call('HDEL', k_held, o.user)
  end
  redis.call('XADD', k_outbox, '*', 'type', 'order.' .. status, 'at', now, 'item', item_id,
    'order', oid, 'user', o.user, 'quantity', o.qty, 'price_cents', o.price)
  return o.qty
end
