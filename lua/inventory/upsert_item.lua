-- upsert_item.lua: create an item or update its attributes, with its outbox event, in one step.
-- Stock is set only on create; an update whose stock differs from the total is refused (stock
-- moves through adjust_stock.lua, which races safely with purchases). changed.lua is prepended.
-- Go caller: inventory.Store.upsertBatch (internal/inventory/redis.go).
-- KEYS[1] item hash  [2] shard outbox stream  [3] shard change log  [4] shard clock
--   [5] the item's restoring mark (restore_begin.lua): while set, a missing hash is a restore's
-- ARGV[1] item id  [2] name  [3] category  [4] price_cents (>= 0)  [5] stock (>= 0; '' = keep,
--   0 on create)  [6] per_user_limit (>= 1)  [7] starts_at ms (>= 0, 0 = live now)  [8] ends_at
--   ms (0 = no end, else > starts_at)  [9] queue admit_per_second  [10] queue max_active
--   [11] queue pass_ttl_seconds (all three 0 = no waiting room, all '' = keep, else each >= 1;
--   item fields q_rate q_max q_ttl)  [12] image_url ('' none, at most 2048 bytes)
--   [13] '1' = keep the current image_url, '0' = set [12]; absent: keep
-- Reply: {'created'|'updated', HGETALL of the item}; nothing written: {'invalid_state', HGETALL}
--   (archived, or a stock change), {'restoring', {}} (create while the mark is set),
--   {'ends_past', {}}, or an error reply for malformed arguments.

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
-- An archived item (archive.lua) is never changed again.
if total ~= nil and (tonumber(redis.call('HGET', KEYS[1], 'archived_at')) or 0) > 0 then
  return {'invalid_state', redis.call('HGETALL', KEYS[1])}
end
-- A past ends_at (Redis's clock) is refused on create and when it changes; an unchanged one is
-- accepted, so an ended sale's name can still be corrected.
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
