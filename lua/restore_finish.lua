-- restore_finish.lua: finish rebuilding one item: write its hash (stock figures computed from
-- the record, so stock_left = stock_total - reserved - paid and nothing can be oversold), and,
-- when the outbox stream is empty, position it after every event the record
-- has seen, so new events sort after the old ones (the record keeps the newest by position).
-- Only for the restorer holding the item's fence; one script so the check and the writes
-- are atomic.
--
-- KEYS[1] the item's restore fence   KEYS[2] item hash   KEYS[3] outbox stream
-- ARGV[1] fencing number   ARGV[2] lowest stream id for new events ("<ms>-<seq>", > 0-0)
-- then field, value pairs of the item hash
-- Reply: {'ok'} | {'fenced', the fencing number stored}
-- Bad arguments: an error reply, nothing written.

local n = tonumber(ARGV[1])
if not n or #ARGV < 4 or #ARGV % 2 ~= 0 or not string.match(ARGV[2], '^%d+%-%d+$') or ARGV[2] == '0-0' then
  return redis.error_reply('ERR restore_finish: bad arguments')
end
local stored = tonumber(redis.call('GET', KEYS[1]) or '0')
if stored ~= n then
  return {'fenced', stored}
end
local fields = {}
for i = 3, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('HSET', KEYS[2], unpack(fields))
if redis.call('XLEN', KEYS[3]) == 0 then
  -- An entry added and deleted in the same script is never seen by a reader; the stream
  -- keeps it as its last id, so the next XADD * is later. An error here means the stream's
  -- last id is already past ARGV[2]: nothing to do.
  local id = redis.pcall('XADD', KEYS[3], ARGV[2], 'type', 'restore.position')
  if type(id) == 'string' then
    redis.call('XDEL', KEYS[3], id)
  end
end
return {'ok'}
