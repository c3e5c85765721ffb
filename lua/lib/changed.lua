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
-- Included in front of the scripts that change an item (see their owners' scripts.go).

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

-- node_history()
--   The replication id of the node running the script (INFO replication's master_replid). A
--   primary and its replicas in step share it; a node gets a new one when it is promoted,
--   restarted or re-synced from another primary. So two nodes whose data diverged (a deposed
--   primary still taking writes, and the replica promoted in its place) never share one:
--   purchase.lua numbers orders in a block of its own per history (order_block).

local function node_history()
  return string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') or ''
end

-- order_block(seq, term, n)
--   The sequence number to count the next orders from, given the item's last one (seq) and
--   the history it was made under (term, the item's `term` field), for a batch of up to n
--   orders, and this node's history (the term to store with them); nil when this history's
--   block cannot hold n more. Order numbers come in blocks of
--   1e9, one block per history: a node whose history is not the item's term (it was promoted,
--   or restarted) counts on from the start of the next block, so it never makes a number the
--   node it diverged from may still make, since that one stays within its block. Numbers stay
--   below 1e14: Lua prints them as integers there.
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
