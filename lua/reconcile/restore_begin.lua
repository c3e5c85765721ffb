-- restore_begin.lua: start rebuilding one item from the Postgres record: take the item's
-- restore fence and clear what the rebuild writes, the item hash first (purchases answer
-- not_found until restore_finish.lua writes it back). One script so a stale restorer, or an
-- item sold since the idle check, is refused before anything is deleted. (changed.lua is
-- prepended.)
-- Go caller: reconcile.Reconciler.restoreWrite (internal/reconcile/restore.go).
-- KEYS[1] the item's restore fence  [2] item hash  [3] orders hash  [4] held hash  [5] paidby hash
--   [6] shard outbox stream  [7] shard change log  [8] shard clock
--   [9] the item's restoring mark (set here, deleted by restore_finish.lua)
--   [10] the item's user orders hash (user -> the user's order seqs)
-- ARGV[1] fencing number (integer 1..2^53 - 1)
--   [2] the item's version the idle check saw ('' for no item hash), or '*' (forced: any)
--   [3] the shard outbox's last id the idle check saw published ("<ms>-<seq>"; ignored
--   when forced)  [4] item id
-- Reply: {'ok', the item's version before (0 if none), its seq before (0 if none)}
--   | {'fenced', the newer fencing number stored}
--   | {'moved', the version now ('' for none), 1 if events up to ARGV[3] wait unpublished else 0}
-- Bad arguments: an error reply, nothing written.

local n = tonumber(ARGV[1])
-- tonumber also reads 'inf' and '1e300': stored, either would refuse every later restorer of
-- the item. Fencing numbers come from lock/obtain.lua, exact integers below 2^53.
if not n or not (n >= 1 and n <= 9007199254740991) or n ~= math.floor(n) then
  return redis.error_reply('ERR restore_begin: bad fencing number')
end
local expected, pos, item_id = ARGV[2], ARGV[3], ARGV[4]
if not expected or not item_id or item_id == '' then
  return redis.error_reply('ERR restore_begin: missing expected version or item id')
end
if expected ~= '*' and not (pos and string.match(pos, '^%d+%-%d+$')) then
  return redis.error_reply('ERR restore_begin: bad outbox position')
end
local stored = tonumber(redis.call('GET', KEYS[1]) or '0')
if stored > n then
  return {'fenced', stored}
end
-- The idle check ran long before this (the settle wait and the Postgres reads lie between):
-- refuse if the version moved or an entry up to ARGV[3] is still in the stream (an event of
-- the item the record may lack).
if expected ~= '*' then
  local now = redis.call('HGET', KEYS[2], 'version') or ''
  local waiting = #redis.call('XRANGE', KEYS[6], '-', pos, 'COUNT', 1)
  if now ~= expected or waiting > 0 then
    return {'moved', now, waiting}
  end
end
redis.call('SET', KEYS[1], n)
-- While marked, upsert_item.lua refuses to create the item, which would sell it at seq 0
-- beside the orders being restored, under their ids.
redis.call('SET', KEYS[9], n)
local f = redis.call('HMGET', KEYS[2], 'version', 'seq')
-- UNLINK: gone at once for every later command, but a large item is freed in the background.
-- The shard-wide keys (expiry index, outbox) stay: restore_put.lua takes this item's expiry
-- entries out one by one.
redis.call('UNLINK', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[10])
mark_changed(KEYS[7], KEYS[8], item_id)
return {'ok', tonumber(f[1]) or 0, tonumber(f[2]) or 0}
