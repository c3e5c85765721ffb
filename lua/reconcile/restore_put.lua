-- restore_put.lua: write one bounded chunk of an item's rebuilt state, only for the restorer
-- holding the item's fence. One script so the fence check and the writes are atomic: a stale
-- restorer writes nothing once a newer one began.
-- Go caller: reconcile.Reconciler.put (internal/reconcile/restore.go).
-- KEYS[1] the item's restore fence  [2] orders hash  [3] held hash  [4] paidby hash
--   [5] shard expiry zset  [6] the item's user orders hash  [7] the item's payments hash
-- ARGV[1] fencing number, then entries of three: kind, a, b
--   order: a = order id, b = packed order       held: a = user, b = units (integer >= 1)
--   paid:  a = user, b = units (integer >= 1)   exp:  a = order id, b = expires ms
--   useqs: a = user, b = the user's order sequence numbers of the item, "3,17,42"
--   unexp: a = an expiry index member of the live state, b ignored: removed
--   pay:   a = order id, b = its payment record "payment id|state||attempt", written only
--          where the order has none
--   Numbers are plain decimal digits (at most 2^53 - 1).
-- Reply: {'ok', entries written} | {'fenced', the fencing number stored}
-- Bad arguments: an error reply, nothing written.

local n = tonumber(ARGV[1])
local entries = (#ARGV - 1) / 3
if not n or entries ~= math.floor(entries) then
  return redis.error_reply('ERR restore_put: bad arguments')
end
if #KEYS ~= 7 then
  return redis.error_reply('ERR restore_put: 7 keys are needed')
end
for i = 0, entries - 1 do
  local kind, a, b = ARGV[2 + 3 * i], ARGV[3 + 3 * i], ARGV[4 + 3 * i]
  if kind == 'held' or kind == 'paid' or kind == 'exp' then
    -- Plain decimal digits, exactly representable: tonumber also reads 'inf' (held inf would
    -- bar the user for good, exp inf never expires), '1e3', '0x10' and ' 5', which HSET would
    -- store as such (HINCRBY, and so every later cancel or expiry of the user's orders, then
    -- fails half-way) or ZADD would refuse after this chunk's earlier writes.
    local x = string.match(b, '^%d+$') and tonumber(b)
    local min = (kind == 'held' or kind == 'paid') and 1 or 0
    if not x or x < min or x > 9007199254740991 or a == '' then
      return redis.error_reply('ERR restore_put: bad number in entry ' .. (i + 1))
    end
  elseif kind == 'order' then
    if a == '' or not string.match(b, '^[^|]+|%d+|%d+|%a+|%d+|%d+$') then
      return redis.error_reply('ERR restore_put: bad order in entry ' .. (i + 1))
    end
  elseif kind == 'useqs' then
    -- Decimal numbers joined by single commas: readers split it on ','.
    if a == '' or not string.match(b, '^%d[%d,]*$') or string.sub(b, -1) == ','
        or string.find(b, ',,', 1, true) then
      return redis.error_reply('ERR restore_put: bad order list in entry ' .. (i + 1))
    end
  elseif kind == 'pay' then
    if a == '' or not string.match(b, '^[%w_]+|%a+||[%w_]*$') then
      return redis.error_reply('ERR restore_put: bad payment record in entry ' .. (i + 1))
    end
  elseif kind == 'unexp' then
    if a == '' then
      return redis.error_reply('ERR restore_put: bad id in entry ' .. (i + 1))
    end
  else
    return redis.error_reply('ERR restore_put: unknown kind in entry ' .. (i + 1))
  end
end
local stored = tonumber(redis.call('GET', KEYS[1]) or '0')
if stored ~= n then
  return {'fenced', stored}
end
for i = 0, entries - 1 do
  local kind, a, b = ARGV[2 + 3 * i], ARGV[3 + 3 * i], ARGV[4 + 3 * i]
  if kind == 'order' then
    redis.call('HSET', KEYS[2], a, b)
  elseif kind == 'held' then
    redis.call('HSET', KEYS[3], a, b)
  elseif kind == 'paid' then
    redis.call('HSET', KEYS[4], a, b)
  elseif kind == 'exp' then
    redis.call('ZADD', KEYS[5], b, a)
  elseif kind == 'useqs' then
    redis.call('HSET', KEYS[6], a, b)
  elseif kind == 'pay' then
    redis.call('HSETNX', KEYS[7], a, b) -- a record Redis kept is as new as Postgres's or newer
  else
    redis.call('ZREM', KEYS[5], a)
  end
end
return {'ok', entries}
