-- changed.lua: a library, not a script. It is prepended to every script that changes an item's
-- public fields (the ones bumping the item's `version`), so the shard's change log is written in
-- the same atomic step as the change: a reader can never miss a change it was not told about.
--
-- mark_changed(k_changed, k_clock, item_id)
--   Advances the shard clock (k_clock) to max(clock + 1, Redis TIME in microseconds) and sets
--   the item's score in the change log (k_changed, a zset item -> clock) to it. A reader keeps
--   the highest clock it saw and asks for the items with a higher one. Starting from the time,
--   not from 1, means a clock lost with the data (FLUSHDB, a failover to a stale replica, a
--   restore) comes back above every value a reader saw, so nothing is skipped after a loss.
--   Microseconds since 1970 (~1.8e15) stay below 2^53, so the score is an exact integer.

local function mark_changed(k_changed, k_clock, item_id)
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local clock = (tonumber(redis.call('GET', k_clock)) or 0) + 1
  if now_us > clock then
    clock = now_us
  end
  redis.call('SET', k_clock, string.format('%d', clock))
  redis.call('ZADD', k_changed, string.format('%d', clock), item_id)
end
