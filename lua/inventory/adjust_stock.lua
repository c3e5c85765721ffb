-- adjust_stock.lua: add (delta > 0) or withdraw (delta < 0) unsold stock with its outbox
-- event. One script in the item's slot, so it serialises with purchases: stock_left never goes
-- below zero and stock_total always equals everything loaded. changed.lua is prepended.
-- Go caller: inventory.Store.AdjustStockOnce (internal/inventory/redis.go).
-- KEYS[1] item hash  [2] shard outbox stream  [3] shard change log  [4] shard clock
--   [5] the change's idempotency key (none: any key of the item, untouched)
-- ARGV[1] item id  [2] delta (non-zero integer)  [3] idempotency key ('' none)
--   [4] how long a key is kept, ms (integer 1..1e13)
-- Reply: {outcome, HGETALL of the item}: 'ok'; 'replayed' (the reply first recorded under the
--   key, its item as that change left it); 'not_found' ({}); 'invalid_state' (stock_left would
--   go below zero, or archived); 'too_large' (stock_total would pass 2^53 - 1). Only 'ok'
--   writes; bad arguments are an error reply.

local delta = tonumber(ARGV[2])
local idem, idem_ttl = ARGV[3], tonumber(ARGV[4])
-- tonumber also reads 'inf': stock_left would become inf (endless stock), then nan.
if not delta or delta == 0 or delta ~= math.floor(delta) or math.abs(delta) == math.huge then
  return redis.error_reply('ERR adjust_stock: delta must be a non-zero integer')
end
if idem == nil or not idem_ttl or idem_ttl < 1 or idem_ttl > 1e13 or idem_ttl ~= math.floor(idem_ttl) then
  return redis.error_reply('ERR adjust_stock: bad idempotency key or ttl')
end
-- A change applied under a key records its reply there; a retry with the key gets it back and
-- changes nothing, so an admin told "outcome unknown" can retry safely.
if idem ~= '' then
  local prev = redis.call('GET', KEYS[5])
  if prev then
    local r = cmsgpack.unpack(prev)
    return {'replayed', r[2]}
  end
end
local f = redis.call('HMGET', KEYS[1], 'stock_total', 'stock_left', 'archived_at')
local total, left = tonumber(f[1]), tonumber(f[2])
if total == nil then
  return {'not_found', {}}
end
if left + delta < 0 or (tonumber(f[3]) or 0) > 0 then
  return {'invalid_state', redis.call('HGETALL', KEYS[1])}
end
-- Lua numbers are doubles: above 2^53 - 1 a sum drops units while the event says the full delta.
if delta > 0 and total + delta > 9007199254740991 then
  return {'too_large', redis.call('HGETALL', KEYS[1])}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'stock_total', total + delta, 'stock_left', left + delta)
redis.call('HINCRBY', KEYS[1], 'version', 1)
mark_changed(KEYS[3], KEYS[4], ARGV[1])
redis.call('XADD', KEYS[2], '*', 'type', 'stock.adjusted', 'at', now, 'item', ARGV[1],
  'delta', delta, 'stock_total', total + delta)
local reply = {'ok', redis.call('HGETALL', KEYS[1])}
if idem ~= '' then
  redis.call('SET', KEYS[5], cmsgpack.pack(reply), 'PX', idem_ttl)
end
return reply
