-- recategorize.lua: move a rated item to the top-rated board of its new category, without a
-- rating. One script so the item leaves one board and enters the other together, with the stats
-- hash recording where it is ranked. (board.lua is prepended.)
-- Go caller: ranking.Store.SetCategory (internal/ranking/redis.go).
-- KEYS[1] the item's stats hash (count sum cat)  [2] the overall top-rated index (its score)
-- then, only if ARGV[3] ~= ARGV[2]: the board of category ARGV[2] (index, top) unless ARGV[2]
--   is '', then the board of category ARGV[3] (index, top) unless ARGV[3] is ''
-- ARGV[1] item id  [2] the item's category now  [3] the category the caller read
--   from the stats hash  [4] board size N (>= 1)
-- Reply: {'ok'} | {'unrated'} (never rated: its first rating places it) | {'stale', stored}
--   (the stored category is neither ARGV[3] nor ARGV[2]: nothing written, retry with it)
-- A malformed argument is an error reply and writes nothing.

local item, cat, seen, n = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local has_seen = seen ~= cat -- then the board keys of both categories (where not '') follow
local nkeys = 2 + (cat ~= '' and has_seen and 2 or 0) + (seen ~= '' and has_seen and 2 or 0)
if not item or item == '' or not cat or not seen or not whole(n, 1) or #KEYS ~= nkeys then
  return redis.error_reply('ERR recategorize: invalid arguments')
end
local count = tonumber(redis.call('HGET', KEYS[1], 'count'))
if not count then
  return {'unrated'}
end
local stored = redis.call('HGET', KEYS[1], 'cat') or ''
if stored == cat then
  return {'ok'} -- already there (a rating or a concurrent call moved it)
end
if stored ~= seen then
  return {'stale', stored}
end
local member = rated_member(count, item)
local score = tonumber(redis.call('ZSCORE', KEYS[2], member))
if not score then
  return redis.error_reply('ERR recategorize: item missing from the overall board')
end
redis.call('HSET', KEYS[1], 'cat', cat)
local k = 3
if cat ~= '' then
  board_put(KEYS[k], KEYS[k + 1], n, false, member, score)
  k = k + 2
end
if seen ~= '' then
  board_remove(KEYS[k], KEYS[k + 1], n, member)
end
return {'ok'}
