-- rate.lua: set one user's stars for one item and move the item on its top-rated boards,
-- atomically with the rating.set outbox entry (none in 'restore' mode). (board.lua is prepended.)
-- One script because the rating, the item's count and sum, every board and the event must
-- change together: a concurrent rating or a crash between them would leave a board or the
-- event stream disagreeing with the ratings. All keys are in the ranking slot {rank}.
-- The caller checked that the user has paid for the item: the paidby hash lives in the item's
-- slot, so this script cannot read it on a cluster, and a paid order is final, so the check
-- cannot go stale between the two calls.
--
-- Go caller: ranking.Store.rate (internal/ranking/redis.go).
-- KEYS[1] the item's ratings hash (user -> stars)   KEYS[2] the item's stats hash (count sum cat)
-- KEYS[3] the ranking outbox stream   KEYS[4], KEYS[5] the overall top-rated board (index, top)
-- then, if ARGV[4] ~= '': the board of category ARGV[4] (index, top)
-- then, if ARGV[5] ~= '' and ARGV[5] ~= ARGV[4]: the board of category ARGV[5] (index, top)
-- ARGV[1] item id   ARGV[2] user id   ARGV[3] stars (integer 1..5)
-- ARGV[4] the item's category now ('' = none: overall board only)
-- ARGV[5] the category the caller read from the stats hash ('' = none, or never rated)
-- ARGV[6] prior mean m (1..5)   ARGV[7] prior weight C (>= 0)   ARGV[8] board size N (>= 1)
-- ARGV[9] mode: 'set' (a shopper's rating; absent means 'set') or 'restore' (restore's replay
--         of a recorded rating: written only if the user has no rating now, so it never
--         replaces one set since the item went back on sale, and with no rating.set entry, as
--         the record already holds it; the check and the write are one script, so a shopper's
--         rating cannot land between them)
--
-- Score, what the top-rated boards rank by: the Bayesian average (C*m + sum) / (C + count).
-- Every item starts with C imaginary ratings of m stars, so with the defaults (m = 3.5, C = 10)
-- a single 5-star rating scores 40/11 = 3.64 and cannot beat hundreds of 4.8s; with many
-- ratings the score tends to the plain mean. Equal scores: more ratings first, then the smaller
-- item id (see rated_member). One rating per (user, item): rating again replaces the stars.
-- If the item's category changed since its last rating, it moves between category boards.
--
-- Reply: {'ok', average, count}: average is the plain mean sum/count as a string (%.17g, exact),
--        or in 'restore' mode {'kept', average, count} when the user has a rating (nothing
--        written),
--        or {'stale', stored category} when the stats hash's category is neither ARGV[5] nor
--        ARGV[4] (a concurrent call moved the item; nothing written: retry with the stored one).
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
  -- A rating set since the item went back on sale (or one Redis never lost): it stands.
  local st = redis.call('HMGET', KEYS[2], 'count', 'sum')
  local count, sum = tonumber(st[1]) or 0, tonumber(st[2]) or 0
  return {'kept', string.format('%.17g', count > 0 and sum / count or 0), count}
end
if prev and not prev_count then
  return redis.error_reply('ERR rate: the item has ratings but no count; nothing written')
end
redis.call('HSET', KEYS[1], user, stars)
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
local old_member = before > 0 and rated_member(before, item)
local member = rated_member(count, item)
local score = -((c * m + sum) / (c + count)) -- negated: best first

board_put(KEYS[4], KEYS[5], n, old_member, member, score)
local k = 6
if cat ~= '' then
  board_put(KEYS[k], KEYS[k + 1], n, old_member, member, score)
  k = k + 2
end
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
