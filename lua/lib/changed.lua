-- changed.lua: a library, not a script, prepended to every script that changes an item's
-- public fields (those bumping its `version`; see the owners' scripts.go), so the shard's change
-- log is written in the same atomic step as the change and a reader misses none.

-- mark_changed(k_changed, k_clock, item_id) advances the shard clock to max(clock + 1, Redis
-- TIME in us) and scores the item with it in the change log (zset item -> clock). Readers ask
-- for clocks above the highest they saw; starting from the time, a clock lost with the data
-- (flush, stale replica promoted, restore) comes back above all of them, so nothing is skipped.
local function mark_changed(k_changed, k_clock, item_id)
  local t = redis.call('TIME')
  -- Microseconds since 1970 (~1.8e15) stay below 2^53: the score is an exact integer.
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local clock = (tonumber(redis.call('GET', k_clock)) or 0) + 1
  if now_us > clock then
    clock = now_us
  end
  redis.call('SET', k_clock, string.format('%d', clock))
  redis.call('ZADD', k_changed, string.format('%d', clock), item_id)
end

-- node_history(): the running node's replication id (master_replid). A primary and its replicas
-- in step share it; promotion, restart or re-sync gives a new one, so two nodes whose data
-- diverged (a deposed primary still writing, the replica promoted in its place) never share one.
local function node_history()
  return string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') or ''
end

-- order_block(seq, term, n) -> the number to count up to n orders on from, given the item's
-- last (seq) and its `term`, and this node's history to store as term; nil when full. Numbers
-- come in blocks of 1e9, one per history: a node of another history starts the next block, so
-- it never makes a number the node it diverged from may still make. Below 1e14 they print whole.
local function order_block(seq, term, n)
  local block = math.floor(seq / 1e9)
  local history = node_history()
  if term ~= history then
    block = block + 1
    seq = block * 1e9
  end
  if seq + n >= (block + 1) * 1e9 or seq + n >= 1e14 then
    return nil, history
  end
  return seq, history
end
