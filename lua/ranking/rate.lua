-- rate.lua: set one user's stars for one item and move the item on its top-rated boards. One
-- script so the rating, the item's count and sum, every board and rating.set change together:
-- a race or a crash leaves none of them disagreeing. (board.lua is prepended.)
-- Go caller: ranking.Store.rate (internal/ranking/redis.go). It checked that the user paid for
--   the item: paidby is in the item's slot, out of reach on a cluster, and a paid order is final.
-- KEYS[1] the item's ratings hash (user -> stars)  [2] the item's stats hash (count sum cat)
--   [3] the ranking outbox stream  [4], [5] the overall top-rated board (index, top)
-- then, if ARGV[4] ~= '': the board of category ARGV[4] (index, top)
-- then, if ARGV[5] ~= '' and ARGV[5] ~= ARGV[4]: the board of category ARGV[5] (index, top)
-- ARGV[1] item id  [2] user id  [3] stars (integer 1..5)
--   [4] the item's category now ('' = none: overall board only)
--   [5] the category the caller read from the stats hash ('' = none, or never rated)
--   [6] prior mean m (1..5)  [7] prior weight C (>= 0)  [8] board size N (>= 1)
--   [9] mode: set (a shopper's rating; the default) | restore (restore's replay of a recorded
--   rating: written only if the user has none now, with no rating.set)
-- Reply: {'ok', average, count}: average the plain mean sum/count as a string (%.17g, exact)
--   | {'kept', average, count} (restore, the user has a rating: nothing written)
--   | {'stale', stored category} (neither ARGV[5] nor ARGV[4]: a concurrent call moved the
--   item; nothing written, retry with the stored one)
-- A malformed argument, or a rating whose item has no count (its stats hash was lost), is an
-- error reply and writes nothing.

local item, user, cat, seen = ARGV[1], ARGV[2], ARGV[4], ARGV[5]
local stars, m, c, n = tonumber(ARGV[3]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local mode = ARGV[9] or 'set'
local has_seen = seen ~= '' and seen ~= cat -- the keys of the seen category's board follow
local nkeys = 5 + (cat ~= '' and 2 or 0) + (has_seen and 2 or 0)
if not item or item == '' or not user or user == '' or not cat or not seen
    or not whole(stars, 1) or stars > 5 or not m or not (m >= 1 and m <= 5)
    or not c or not (c >= 0 and c < math.huge) or not whole(n, 1) or #KEYS ~= nkeys
    or (mode ~= 'set' and mode ~= 'restore') or #ARGV > 9 then
  return redis.error_reply('ERR rate: invalid arguments')
end

-- Where the item is ranked now: already where it belongs, or where the caller saw it (whose
-- board keys were passed); anywhere else, a concurrent call moved it and the keys are wrong.
local stored = redis.call('HGET', KEYS[2], 'cat') or ''
if stored ~= seen and stored ~= cat then
  return {'stale', stored}
end
local moved = stored ~= '' and stored ~= cat

local prev = tonumber(redis.call('HGET', KEYS[1], user))
-- Read before the first write: a count missing beside a rating (the stats hash deleted by
-- hand, say) would otherwise fail the arithmetic below after the rating and sum were written.
local prev_count = prev and tonumber(redis.call('HGET', KEYS[2], 'count'))
if prev and mode == 'restore' then
  -- A rating set since the item went back on sale (or one Redis never lost) stands. Checked
  -- and written in this one script, so a shopper's rating cannot land in between.
  local st = redis.call('HMGET', KEYS[2], 'count', 'sum')
  local count, sum = tonumber(st[1]) or 0, tonumber(st[2]) or 0
  return {'kept', string.format('%.17g', count > 0 and sum / count or 0), count}
end
if prev and not prev_count then
  return redis.error_reply('ERR rate: the item has ratings but no count; nothing written')
end
redis.call('HSET', KEYS[1], user, stars) -- one rating per (user, item): again replaces it
local count, sum
if prev then
  count = prev_count
  sum = redis.call('HINCRBY', KEYS[2], 'sum', stars - prev)
else
  count = redis.call('HINCRBY', KEYS[2], 'count', 1)
  sum = redis.call('HINCRBY', KEYS[2], 'sum', stars)
end
redis.call('HSET', KEYS[2], 'cat', cat)

local before = prev and count or count - 1
-- Equal scores: more ratings first, then the smaller item id (rated_member).
local old_member = before > 0 and rated_member(before, item)
local member = rated_member(count, item)
-- The Bayesian average: C imaginary ratings of m stars, so a few ratings cannot beat many good
-- ones (docs/design.md, "Ranking scripts"). Negated: best first.
local score = -((c * m + sum) / (c + count))

board_put(KEYS[4], KEYS[5], n, old_member, member, score)
local k = 6
if cat ~= '' then
  board_put(KEYS[k], KEYS[k + 1], n, old_member, member, score)
  k = k + 2
end
-- The category changed since the last rating: the item leaves the old category's board.
if moved and old_member then
  board_remove(KEYS[k], KEYS[k + 1], n, old_member)
end

if mode == 'set' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('XADD', KEYS[3], '*', 'type', 'rating.set', 'at', now, 'item', item,
    'user', user, 'stars', stars)
end
return {'ok', string.format('%.17g', sum / count), count}
