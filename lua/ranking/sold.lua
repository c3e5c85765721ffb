-- sold.lua: set an item's units paid on the best-sellers board. (board.lua is prepended.)
-- One script so the index and the bounded top move together.
-- The value is absolute, and the board keeps the largest value it was told: paid orders are
-- final, so an item's paid total never goes down, and a smaller total can only be a report
-- that arrived late (two payments' hooks racing). Calls are idempotent and commute.
-- Equal units: the smaller item id first (the member is the item id, the score is -units).
--
-- Go caller: ranking.Store.SetSold (internal/ranking/redis.go).
-- KEYS[1] best-sellers index   KEYS[2] best-sellers top
-- ARGV[1] item id   ARGV[2] units paid (integer >= 0)   ARGV[3] board size N (>= 1)
-- Reply: the units the board holds for the item after the call (integer).
-- A malformed argument is an error reply and writes nothing.

local item, units, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if not item or item == '' or not whole(units, 0) or not whole(n, 1) then
  return redis.error_reply('ERR sold: invalid arguments')
end
local held = tonumber(redis.call('ZSCORE', KEYS[1], item))
held = held and -held or 0
if units <= held then
  return held
end
board_put(KEYS[1], KEYS[2], n, item, item, -units)
return units
