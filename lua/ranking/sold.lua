-- sold.lua: set an item's units on the best-sellers board. (board.lua is prepended.)
-- One script so the index, the bounded top and the figure's number move together.
-- The units are an absolute figure: paid units, less those of refunded orders (a refunded
-- buyer no longer counts), so the figure goes down as well as up. Reports of one item race
-- (two payments' hooks, a payment's and a refund's), so each carries the figure's number from
-- the item's own script, which grows with every change: a report numbered at or below the one
-- applied is late and changes nothing. Calls are idempotent and commute.
-- A report without a number (0) only raises the figure and leaves the number alone, so it
-- never undoes a newer numbered report. (A restore numbers its figure: restore_finish.lua.)
-- An item whose figure falls to 0 leaves the board.
-- Equal units: the smaller item id first (the member is the item id, the score is -units).
--
-- Go caller: ranking.Store.SetSold (internal/ranking/redis.go).
-- KEYS[1] best-sellers index   KEYS[2] best-sellers top   KEYS[3] numbers hash (item -> number)
-- ARGV[1] item id   ARGV[2] units (integer >= 0)   ARGV[3] board size N (>= 1)
-- ARGV[4] the figure's number (integer >= 1), or 0 for none
-- Reply: the units the board holds for the item after the call (integer).
-- A malformed argument is an error reply and writes nothing.

local item, units, n, seq = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4] or '0')
if not item or item == '' or not whole(units, 0) or not whole(n, 1) or not whole(seq, 0) then
  return redis.error_reply('ERR sold: invalid arguments')
end
local held = tonumber(redis.call('ZSCORE', KEYS[1], item))
held = held and -held or 0
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
board_put(KEYS[1], KEYS[2], n, item, item, -units)
return units
