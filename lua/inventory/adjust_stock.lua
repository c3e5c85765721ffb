-- adjust_stock.lua: add (delta > 0) or withdraw (delta < 0) unsold stock, atomically with its
-- outbox event. Runs in the item's slot like purchase.lua, so it serialises with purchases:
-- stock_left never goes below zero and stock_total always equals everything loaded.
-- stock_total never goes above 2^53 - 1: Lua numbers are doubles, and above that a sum drops
-- units (2^53 - 2 plus 3 reads back 2^53) while the event still says the full delta.
--
-- An optional Idempotency-Key: a change applied under a key records its reply
-- there, and a retry with the key gets that reply back ('replayed') and changes nothing, so an
-- admin who got "outcome unknown" can retry safely. A refused change records nothing.
--
-- Go caller: inventory.Store.AdjustStockOnce (internal/inventory/redis.go).
-- KEYS[1] item hash   KEYS[2] shard outbox stream   KEYS[3] shard change log   KEYS[4] shard clock
-- KEYS[5] the change's idempotency key (any key of the item when it has none: not touched)
-- ARGV[1] item id   ARGV[2] delta (non-zero integer)   ARGV[3] idempotency key ('' none)
-- ARGV[4] how long a key is kept, ms (integer 1..1e13)
-- Reply: {'ok'|'replayed'|'not_found'|'invalid_state'|'too_large', HGETALL of the item};
--        replayed: the reply first recorded under the key, its item as that change left it;
--        invalid_state: stock_left would go below zero or the item is archived, too_large: stock_total would go above
--        2^53 - 1 (both write nothing); an error reply for a malformed argument (nothing written).

local delta = tonumber(ARGV[2])
local idem, idem_ttl = ARGV[3], tonumber(ARGV[4])
-- tonumber also reads 'inf': stock_left would become inf (endless stock), then nan.
if not delta or delta == 0 or delta ~= math.floor(delta) or math.abs(delta) == math.huge then
  return redis.error_reply('ERR adjust_stock: delta must be a non-zero integer')
end
if idem == nil or not idem_ttl or idem_ttl < 1 or idem_ttl > 1e13 or idem_ttl ~= math.floor(idem_ttl) then
  return redis.error_reply('ERR adjust_stock: bad idempotency key or ttl')
end
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
