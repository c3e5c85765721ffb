-- restore_finish.lua: finish rebuilding one item: write its hash (stock figures from the record,
-- stock_left = stock_total - reserved - paid, so nothing can be oversold) and move the shard's
-- outbox stream past every event of the item the record has seen, so new events sort after them
-- and no new event id repeats an old one. One script so the fence check and the writes are
-- atomic. (changed.lua is prepended.)
-- Go caller: reconcile.Reconciler.restoreWrite (internal/reconcile/restore.go).
-- KEYS[1] the item's restore fence  [2] item hash  [3] shard outbox stream  [4] shard change log
--   [5] shard clock  [6] the item's restoring mark (deleted)
-- ARGV[1] fencing number  [2] lowest stream id for new events ("<ms>-<seq>", > 0-0)
--   [3] item id, then field, value pairs of the item hash
-- Reply: {'ok', sold_seq} | {'fenced', the fencing number stored}; sold_seq: the number of the
--   item's best-sellers figure as written (best_sellers in lua/orders/release.lua)
-- Bad arguments: an error reply, nothing written.

local n = tonumber(ARGV[1])
if not n or #ARGV < 5 or #ARGV % 2 ~= 1 or not string.match(ARGV[2], '^%d+%-%d+$') or ARGV[2] == '0-0'
    or ARGV[3] == '' then
  return redis.error_reply('ERR restore_finish: bad arguments')
end
local stored = tonumber(redis.call('GET', KEYS[1]) or '0')
if stored ~= n then
  return {'fenced', stored}
end
local fields = {}
for i = 4, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('HSET', KEYS[2], unpack(fields))
-- Numbered afresh from Redis TIME in microseconds: above any number the item's lost state
-- gave, below any the live scripts give it after this call.
local t = redis.call('TIME')
redis.call('HSET', KEYS[2], 'sold_seq', t[1] .. string.format('%06d', tonumber(t[2])))
local sold_seq = redis.call('HINCRBY', KEYS[2], 'sold_seq', 1)
redis.call('DEL', KEYS[6])
mark_changed(KEYS[4], KEYS[5], ARGV[3])
-- An entry added and deleted in the same script is never seen by a reader; the stream keeps
-- it as its last id, so the next XADD * is later. An error here means the stream's last id is
-- already past ARGV[2] (other items' events, or a stream that never lost its data): nothing
-- to do.
local id = redis.pcall('XADD', KEYS[3], ARGV[2], 'type', 'restore.position')
if type(id) == 'string' then
  redis.call('XDEL', KEYS[3], id)
end
return {'ok', sold_seq}
