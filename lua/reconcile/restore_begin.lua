-- restore_begin.lua: start rebuilding one item from the Postgres record: take the item's
-- restore fence and clear what the rebuild will write. The item hash goes first, so purchases
-- answer not_found until restore_finish.lua writes it back with the right stock.
-- One script so a stale restorer (one that stalled past its lock's TTL) is refused before it
-- deletes anything a newer restorer wrote, and so an item that was sold after the restorer
-- found it idle is refused before its live orders are deleted (the idle check runs long
-- before this: the settle wait and the Postgres reads lie between). (changed.lua is prepended.)
-- The shard-wide keys (expiry index, users' item indexes, outbox) are shared with the shard's
-- other items, so they are not deleted: restore_put.lua removes this item's entries one by one.
--
-- Go caller: reconcile.Reconciler.restoreItem (internal/reconcile/restore.go).
-- KEYS[1] the item's restore fence   KEYS[2] item hash   KEYS[3] orders hash   KEYS[4] held hash
-- KEYS[5] paidby hash   KEYS[6] shard outbox stream   KEYS[7] shard change log
-- KEYS[8] shard clock   KEYS[9] the item's restoring mark (set here, deleted by restore_finish.lua:
--         meanwhile upsert_item.lua refuses to create the item, which would sell it at seq 0
--         beside the orders being restored, under their ids)
-- KEYS[10] the item's user orders hash (user -> the user's order seqs)
-- ARGV[1] fencing number (integer 1..2^53 - 1)
-- ARGV[2] the item's version the idle check saw ('' for no item hash), or '*' (forced: any)
-- ARGV[3] the shard outbox's last id the idle check saw published ("<ms>-<seq>"; ignored
--         when forced): an entry at or before it still in the stream means an event of the
--         item may not be in the record yet
-- ARGV[4] item id
-- Reply: {'ok', the item's version before (0 if none), its seq before (0 if none)}
--        | {'fenced', the newer fencing number stored}
--        | {'moved', the version now ('' for none), 1 if events up to ARGV[3] wait unpublished else 0}
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
if expected ~= '*' then
  local now = redis.call('HGET', KEYS[2], 'version') or ''
  local waiting = #redis.call('XRANGE', KEYS[6], '-', pos, 'COUNT', 1)
  if now ~= expected or waiting > 0 then
    return {'moved', now, waiting}
  end
end
redis.call('SET', KEYS[1], n)
redis.call('SET', KEYS[9], n)
local f = redis.call('HMGET', KEYS[2], 'version', 'seq')
-- UNLINK: the same at once for every later command, but an item of a million orders is freed
-- in the background instead of blocking Redis while this script runs.
redis.call('UNLINK', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[10])
mark_changed(KEYS[7], KEYS[8], item_id)
return {'ok', tonumber(f[1]) or 0, tonumber(f[2]) or 0}
