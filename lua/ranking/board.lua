-- board.lua: bounded leaderboards (top N), prepended to rate.lua, sold.lua and recategorize.lua.
--
-- A board is two sorted sets in the ranking slot {rank}: the index ranks every member, the top
-- holds exactly the first N members of the index, with the same scores. Keeping the full index
-- is what makes the top exact: when a member's score goes down it can leave the top, and the
-- member that takes its place is known only to the index (a set that evicted it cannot bring it
-- back). Reads touch only the top: one ZRANGE of at most N entries.
--
-- Order: Redis' own (score ascending, then member bytes ascending). Callers store the negated
-- score, so the best comes first, and put their tie-break into the member.
-- Included in front of the ranking scripts (internal/ranking/scripts.go).

-- whole reports whether x is a finite integer >= min (tonumber accepts 'nan' and 'inf').
local function whole(x, min)
  return x ~= nil and x == x and x >= min and x ~= math.huge and x == math.floor(x)
end

-- board_settle restores "top = first n members of idx" after idx changed by one item:
-- old_member (or false) is no longer in idx, member (or false) is now in idx with score.
-- It relies on the top having been exact before; it also heals a top that is longer than n
-- (N shrank) or shorter than it should be (N grew, or a member fell out of the top).
local function board_settle(idx, top, n, old_member, member, score)
  if old_member then redis.call('ZREM', top, old_member) end
  if member then
    local rank = redis.call('ZRANK', idx, member)
    if rank and rank < n then redis.call('ZADD', top, score, member) end
  end
  local card = redis.call('ZCARD', top)
  if card > n then
    -- the member just added pushed the previous n-th out: evict by rank, never by score
    redis.call('ZREMRANGEBYRANK', top, n, -1)
  elseif card < math.min(n, redis.call('ZCARD', idx)) then
    -- a member fell out of the top: its successor is in the index only, so copy the first n
    redis.call('ZRANGESTORE', top, idx, 0, n - 1)
  end
end

-- board_put moves an item on a board: its old member (or false) leaves, member enters with score.
local function board_put(idx, top, n, old_member, member, score)
  if old_member and old_member ~= member then redis.call('ZREM', idx, old_member) end
  redis.call('ZADD', idx, score, member)
  board_settle(idx, top, n, old_member, member, score)
end

-- board_remove takes an item's member off a board.
local function board_remove(idx, top, n, member)
  redis.call('ZREM', idx, member)
  board_settle(idx, top, n, member, false, 0)
end

-- rated_member is an item's member on the top-rated boards: equal scores rank more ratings
-- first (the count is stored inverted, zero-padded, so byte order is count descending), then
-- the smaller item id (byte order). Item ids never contain ':'.
local function rated_member(count, item)
  return string.format('%010d:%s', 9999999999 - count, item)
end
