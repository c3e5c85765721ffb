-- upsert_item.lua: create an item or update its attributes, atomically with its outbox event.
-- Stock is only set on create; an update whose stock differs from the current total is
-- refused (stock moves through adjust_stock.lua, which races safely with purchases).
--
-- Go caller: inventory.Store.upsertBatch (internal/inventory/redis.go).
-- KEYS[1] item hash   KEYS[2] shard outbox stream   KEYS[3] shard change log   KEYS[4] shard clock
-- KEYS[5] the item's restoring mark (restore_begin.lua): while it is set, the missing hash is
--         a restore's, not a new item's, and a create is refused
-- ARGV[1] item id  ARGV[2] name  ARGV[3] category  ARGV[4] price_cents (>=0)
-- ARGV[5] stock (>=0, '' = keep / 0 on create)  ARGV[6] per_user_limit (>=1)
-- ARGV[7] starts_at ms (>=0, 0 = live now)  ARGV[8] ends_at ms (0 = no end, else > starts_at)
-- ARGV[9] queue admit_per_second  ARGV[10] queue max_active  ARGV[11] queue pass_ttl_seconds:
--   all 0 = no waiting room, all '' = keep the current one, else each >= 1 (item fields
--   q_rate q_max q_ttl, read by the queue scripts and purchase.lua)
-- ARGV[12] image_url ('' = none; at most 2048 bytes, checked by the caller)
-- ARGV[13] '1' = keep the current image_url (ARGV[12] ignored), '0' = set ARGV[12]; both absent:
--   keep
-- An ends_at in the past (by Redis's clock) is refused on create and when it changes; an
-- unchanged past ends_at is accepted (an ended sale's name can still be corrected).
-- An archived item (archive.lua) is never changed again: {'invalid_state', HGETALL}.
-- Reply: {'created'|'updated', HGETALL of the item} or {'invalid_state', HGETALL} or
--        {'restoring', {}} or {'ends_past', {}} (nothing written) or
--        an error reply for malformed arguments (nothing written).

local price = tonumber(ARGV[4])
local stock = ARGV[5] == '' and -1 or tonumber(ARGV[5])
local per_user = tonumber(ARGV[6])
local starts = tonumber(ARGV[7])
local ends = tonumber(ARGV[8])
-- tonumber also reads 'inf' and 'nan'; an item field holding one would never read back.
local function whole(x, min) return x and x >= min and x < math.huge and x == math.floor(x) end
if ARGV[1] == '' or ARGV[2] == '' or not whole(price, 0) or (ARGV[5] ~= '' and not whole(stock, 0))
  or not whole(per_user, 1) or not whole(starts, 0) or not whole(ends, 0)
  or (ends > 0 and ends <= starts) then
  return redis.error_reply('ERR upsert_item: invalid arguments')
end
local keep_queue = ARGV[9] == '' and ARGV[10] == '' and ARGV[11] == ''
local q_rate, q_max, q_ttl = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
if not keep_queue and not ((q_rate == 0 and q_max == 0 and q_ttl == 0)
    or (whole(q_rate, 1) and whole(q_max, 1) and whole(q_ttl, 1))) then
  return redis.error_reply('ERR upsert_item: invalid queue settings')
end
local image, keep_image = ARGV[12] or '', ARGV[13] ~= '0'
if #image > 2048 or (ARGV[13] ~= nil and ARGV[13] ~= '0' and ARGV[13] ~= '1') then
  return redis.error_reply('ERR upsert_item: invalid image_url')
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local total = tonumber(redis.call('HGET', KEYS[1], 'stock_total'))
local outcome = 'updated'
if total ~= nil and (tonumber(redis.call('HGET', KEYS[1], 'archived_at')) or 0) > 0 then
  return {'invalid_state', redis.call('HGETALL', KEYS[1])}
end
if ends > 0 and ends <= now and (total == nil or tonumber(redis.call('HGET', KEYS[1], 'ends_at')) ~= ends) then
  return {'ends_past', {}}
end
if total == nil then
  if redis.call('EXISTS', KEYS[5]) == 1 then
    return {'restoring', {}}
  end
  outcome = 'created'
  if stock < 0 then stock = 0 end
  total = stock
  redis.call('HSET', KEYS[1], 'stock_total', stock, 'stock_left', stock, 'reserved', 0,
    'paid', 0, 'seq', 0, 'version', 0, 'term', node_history())
elseif stock >= 0 and stock ~= total then
  return {'invalid_state', redis.call('HGETALL', KEYS[1])}
end
redis.call('HSET', KEYS[1], 'name', ARGV[2], 'category', ARGV[3], 'price_cents', price,
  'per_user_limit', per_user, 'starts_at', starts, 'ends_at', ends)
if not keep_queue then
  redis.call('HSET', KEYS[1], 'q_rate', q_rate, 'q_max', q_max, 'q_ttl', q_ttl)
end
if keep_image then
  image = redis.call('HGET', KEYS[1], 'image_url') or ''
else
  redis.call('HSET', KEYS[1], 'image_url', image)
end
redis.call('HINCRBY', KEYS[1], 'version', 1)
mark_changed(KEYS[3], KEYS[4], ARGV[1])
redis.call('XADD', KEYS[2], '*', 'type', 'item.upserted', 'at', now, 'item', ARGV[1],
  'name', ARGV[2], 'category', ARGV[3], 'price_cents', price, 'stock_total', total,
  'per_user_limit', per_user, 'starts_at', starts, 'ends_at', ends, 'image_url', image)
return {outcome, redis.call('HGETALL', KEYS[1])}
