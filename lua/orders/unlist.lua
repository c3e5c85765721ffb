-- unlist.lua: take out of ONE shopper's order index (keyspace.Space.UserOrderIndex) the items
-- that name no order of the shopper (a refused purchase's blind write, or pruning, leaves one).
-- One script: comparing the counter and deleting must not be split by another write
-- (docs/design.md, "GET /api/orders").
-- Go caller: orders.Index.unlist (internal/orders/index.go).
-- KEYS[1] the user's order index (hash item id -> change counter, '?'..item -> mark)
-- ARGV[1] grace ms (integer 1..1e13), then pairs: item id, the counter the reader saw ('': the
--   item has orders again, or its field is gone: drop its mark)
-- Reply: how many items left the index. Bad arguments: an error reply, nothing written.

local grace = tonumber(ARGV[1])
if not grace or grace < 1 or grace > 1e13 or grace ~= math.floor(grace) or #ARGV < 3 or #ARGV % 2 ~= 1 then
  return redis.error_reply('ERR unlist: ARGV must be the grace, then pairs of item id and counter')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local removed = 0
for i = 2, #ARGV, 2 do
  local item, seen = ARGV[i], ARGV[i + 1]
  -- Mark first ("counter|ms"), remove once the mark is the grace old and the counter the same:
  -- on a cluster the blind write may land before its order exists, and a purchase in flight
  -- either made its order within the grace or wrote the field again, changing the counter.
  local mark_field = '?' .. item
  if seen == '' then
    redis.call('HDEL', KEYS[1], mark_field)
  elseif redis.call('HGET', KEYS[1], item) == seen then
    local mark = redis.call('HGET', KEYS[1], mark_field)
    local marked, at = nil, nil
    if mark then
      marked, at = string.match(mark, '^(%-?%d+)|(%d+)$')
    end
    if marked == seen and now - tonumber(at) >= grace then
      redis.call('HDEL', KEYS[1], item, mark_field)
      removed = removed + 1
    elseif marked ~= seen then
      redis.call('HSET', KEYS[1], mark_field, seen .. '|' .. string.format('%d', now))
    end
  end
  -- else: written since the reader's read; the next reader looks again
end
return removed
