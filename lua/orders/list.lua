#!lua flags=no-writes
-- list.lua: one shopper's orders of ONE item, for "my orders" (docs/design.md,
-- "GET /api/orders"). One script so an item costs one command however many orders of it the
-- shopper has; the reader calls it per item of the shopper's order index, in one pipeline.
-- Read-only (no-writes): nothing to record, safe to send again.
-- Go caller: orders.Store.ListSince (internal/orders/redis.go).
-- KEYS[1] the item's user orders hash (user -> the user's order seqs, "3,17,42")
--   [2] the item's orders hash  [3] the item's payments hash
-- ARGV[1] user id  [2] item id
-- Reply: {order id, packed order, payment record or '', ...} per order of the user, ascending;
--   a seq whose record is gone is skipped; {} for none (a stale index field, or all pruned).

local user, item_id = ARGV[1], ARGV[2]
if not user or user == '' or not item_id or item_id == '' then
  return redis.error_reply('ERR list: bad user or item id')
end
local seqs = redis.call('HGET', KEYS[1], user)
if not seqs then
  return {}
end
local ids = {}
for s in string.gmatch(seqs, '[^,]+') do
  ids[#ids + 1] = item_id .. '.' .. s
end
local out = {}
-- HMGET in bounded chunks: unpack of a long list fails.
for first = 1, #ids, 500 do
  local last = math.min(first + 499, #ids)
  local recs = redis.call('HMGET', KEYS[2], unpack(ids, first, last))
  local pays = redis.call('HMGET', KEYS[3], unpack(ids, first, last))
  for j = 1, last - first + 1 do
    if recs[j] then
      out[#out + 1] = ids[first + j - 1]
      out[#out + 1] = recs[j]
      out[#out + 1] = pays[j] or ''
    end
  end
end
return out
