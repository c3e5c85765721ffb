-- board.lua: bounded leaderboards (top N), a library prepended to the ranking scripts
-- (internal/ranking/scripts.go). A board is two sorted sets in {rank}: the index ranks every
-- member, the top holds exactly its first N with the same scores, and reads touch only the top.
-- Only the full index knows who takes the place of a member whose score went down. Order is
-- Redis' (score, then member bytes): callers store the negated score and put ties in the member.

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
