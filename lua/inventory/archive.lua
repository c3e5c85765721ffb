-- archive.lua: take an item off sale for good, with its outbox event. One script in the item's
-- slot: purchase.lua reads archived_at in the same step as the stock, so once this has run no
-- purchase of the item succeeds. Orders, reservations, the record and the item's fields stay
-- (reports and boards still name it). changed.lua is prepended.
-- Go caller: inventory.Store.Archive (internal/inventory/redis.go).
-- KEYS[1] item hash  [2] shard outbox stream  [3] shard change log  [4] shard clock
-- ARGV[1] item id
-- Reply: {'archived', HGETALL of the item} (now, or before: then nothing changes)
--   | {'not_found', {}}

if ARGV[1] == nil or ARGV[1] == '' then
  return redis.error_reply('ERR archive: item id required')
end
if redis.call('HEXISTS', KEYS[1], 'stock_total') == 0 then
  return {'not_found', {}}
end
if (tonumber(redis.call('HGET', KEYS[1], 'archived_at')) or 0) > 0 then
  return {'archived', redis.call('HGETALL', KEYS[1])}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'archived_at', string.format('%d', now))
redis.call('HINCRBY', KEYS[1], 'version', 1)
mark_changed(KEYS[3], KEYS[4], ARGV[1])
redis.call('XADD', KEYS[2], '*', 'type', 'item.archived', 'at', string.format('%d', now), 'item', ARGV[1])
return {'archived', redis.call('HGETALL', KEYS[1])}
