-- sold.lua: set an item's units on the best-sellers board. One script so the index, the bounded
-- top and the figure's number move together. Reports of one item race, so each carries the
-- number the item's own script gave the figure: a late one changes nothing, and calls are
-- idempotent and commute (docs/design.md, "Ranking scripts"). (board.lua is prepended.)
-- Go caller: ranking.Store.SetSoldAt (internal/ranking/redis.go).
-- KEYS[1] best-sellers index  [2] best-sellers top  [3] numbers hash (item -> number)
-- ARGV[1] item id  [2] units (integer >= 0: paid, less those of refunded orders)
--   [3] board size N (>= 1)  [4] the figure's number (integer >= 1), or 0 for none
-- Reply: the units the board holds for the item after the call (integer).
-- A malformed argument is an error reply and writes nothing.

local item, units, n, seq = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4] or '0')
if not item or item == '' or not whole(units, 0) or not whole(n, 1) or not whole(seq, 0) then
  return redis.error_reply('ERR sold: invalid arguments')
end
local held = tonumber(redis.call('ZSCORE', KEYS[1], item))
held = held and -held or 0
-- Without a number a report only raises the figure, so it never undoes a newer numbered one.
if seq == 0 then
  if units <= held then
    return held
  end
else
  local last = tonumber(redis.call('HGET', KEYS[3], item))
  if last and seq <= last then
    return held
  end
  redis.call('HSET', KEYS[3], item, ARGV[4])
  if units == held then
    return held
  end
end
if units == 0 then
  board_remove(KEYS[1], KEYS[2], n, item)
  return 0
end
-- Equal units: the smaller item id first (the member is the item id).
board_put(KEYS[1], KEYS[2], n, item, item, -units)
return units
