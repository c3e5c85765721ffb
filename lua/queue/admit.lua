-- queue/admit.lua: one admission step of one item's waiting room (docs/waiting-room.md,
-- "Admission"). One script, so the api instances, each calling it per item on every tick,
-- share one line and one rate. (queue/ticket.lua is prepended.)
-- Go caller: queue.Store.Admit (internal/queue/redis.go).
-- KEYS[1] item hash  [2] line zset  [3] tickets hash  [4] line state hash  [5] passes zset
--   [6] recent admissions zset  [7] shard outbox stream
-- ARGV[1] most admissions in this call (integer >= 1)
--   [2] most pre-start tickets numbered in this call (integer >= 1)
--   [3] most expired passes cleared in this call (integer 1..1000, bounds unpack)
--   [4] item id (named in the queue.admitted entry each admission appends to the outbox)
-- Reply: {status, now_ms, admitted, waiting, live, admitted_now, stock_left}
--   status: none (no item or no waiting room) | upcoming | fixing (numbering the pre-start
--   group: call again) | live | sold_out | ended
--   admitted: ever admitted from this line (its head); waiting: line length; live: unspent,
--   unexpired passes; admitted_now: passes issued by this call

local most, chunk, expire_most = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local function count(x, hi) return x and x >= 1 and x <= hi and x == math.floor(x) end
local item = ARGV[4]
if not count(most, 1e6) or not count(chunk, 1e6) or not count(expire_most, 1000)
  or not item or not string.match(item, '^[%w_-]+$') or #item > 64 then
  return redis.error_reply('ERR queue_admit: bad limits')
end

local now = now_ms()
local f = redis.call('HMGET', KEYS[1], 'stock_total', 'stock_left', 'reserved', 'starts_at',
  'ends_at', 'q_rate', 'q_max', 'q_ttl', 'per_user_limit', 'archived_at')
local rate, max_active, ttl = tonumber(f[6]) or 0, tonumber(f[7]) or 0, tonumber(f[8]) or 0
local st = redis.call('HMGET', KEYS[4], 'pre', 'popped', 'fixed', 'tokens', 'tok_ms', 'passno')
local pre, popped, fixed = tonumber(st[1]) or 0, tonumber(st[2]) or 0, tonumber(st[3]) or 0
local waiting = redis.call('ZCARD', KEYS[2])
if f[1] == false or rate <= 0 or max_active <= 0 or ttl <= 0 then
  return {'none', now, popped, waiting, 0, 0, 0}
end
local left, reserved = tonumber(f[2]) or 0, tonumber(f[3]) or 0
local starts, ends = tonumber(f[4]) or 0, tonumber(f[5]) or 0

-- Passes past their expiry free their place. A ticket that moved on (its shopper joined
-- again) keeps its new state; a spent one leaves the spent count.
local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, expire_most)
for _, pass in ipairs(gone) do
  local user = string.match(pass, '^(.*)%.%d+$')
  local t = user and redis.call('HGET', KEYS[3], user)
  if t then
    local s, line, p, exp = ticket_unpack(t)
    if p == pass and s == 'a' then
      redis.call('HSET', KEYS[3], user, ticket_pack('x', line, p, exp))
    elseif p == pass and s == 's' then
      redis.call('HINCRBY', KEYS[3], '#spent', -1)
    end
  end
end
if #gone > 0 then
  redis.call('ZREM', KEYS[5], unpack(gone))
end
local live = redis.call('ZCARD', KEYS[5]) - (tonumber(redis.call('HGET', KEYS[3], '#spent')) or 0)

if now < starts then
  return {'upcoming', now, popped, waiting, live, 0, left}
end

-- The start fixes the shuffled order: the pre-start group, ranked by its random scores, is
-- numbered popped+1.. in line order (they are the head of the line: every later join scores
-- above them). Admission waits until all of them have their number.
if fixed < pre then
  local from = math.max(fixed, popped) + 1
  local to = math.min(pre, from + chunk - 1)
  local users = redis.call('ZRANGE', KEYS[2], from - popped - 1, to - popped - 1)
  for j, user in ipairs(users) do
    redis.call('HSET', KEYS[3], user, ticket_pack('w', from + j - 1, '', 0))
  end
  redis.call('HSET', KEYS[4], 'fixed', to)
  if to < pre then
    return {'fixing', now, popped, waiting, live, 0, left}
  end
end

-- Nothing is admitted after the end, or while sold out with nothing reserved to come back.
local status = 'live'
if ends > 0 and now >= ends then
  status = 'ended'
elseif (left <= 0 and reserved <= 0) or (tonumber(f[10]) or 0) > 0 then
  status = 'sold_out' -- an archived item sells nothing more: its tickets read sold_out
end
if status ~= 'live' then
  return {status, now, popped, waiting, live, 0, left}
end

-- The rate: a token bucket refilled at rate/s holding at most one second's worth, and the
-- admissions of the last second (KEYS[6], members "count:first pass number") at most rate.
local tokens, tok_ms = tonumber(st[4]) or 0, tonumber(st[5]) or now
tokens = math.min(rate, tokens + math.max(0, now - tok_ms) * rate / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now - 1000)
local in_second = 0
for _, m in ipairs(redis.call('ZRANGE', KEYS[6], 0, -1)) do
  in_second = in_second + (tonumber(string.match(m, '^(%d+):')) or 0)
end
-- Units: a pass may buy up to per_user_limit units, or all that is left if less, and the live
-- passes' units never exceed stock_left, so nobody is admitted to find nothing to buy.
local per_pass = math.max(1, math.min(tonumber(f[9]) or 1, left))
local k = math.min(math.floor(tokens), rate - in_second, max_active - live,
  math.floor(left / per_pass) - live, waiting, most)
local passno = tonumber(st[6]) or 0
if k > 0 then
  local head = redis.call('ZPOPMIN', KEYS[2], k)
  local expires = now + ttl * 1000
  for j = 1, k do
    local user = head[2 * j - 1]
    local pass = user .. '.' .. string.format('%d', passno + j)
    redis.call('ZADD', KEYS[5], expires, pass)
    redis.call('HSET', KEYS[3], user, ticket_pack('a', popped + j, pass, expires))
    redis.call('XADD', KEYS[7], '*', 'type', 'queue.admitted', 'at', now, 'item', item, 'user', user)
  end
  redis.call('ZADD', KEYS[6], now, k .. ':' .. string.format('%d', passno + 1))
  redis.call('PEXPIRE', KEYS[6], 2000)
  popped, passno, tokens = popped + k, passno + k, tokens - k
  live, waiting = live + k, waiting - k
else
  k = 0
end
redis.call('HSET', KEYS[4], 'popped', popped, 'passno', passno, 'tokens', tostring(tokens), 'tok_ms', now)
return {status, now, popped, waiting, live, k, left}
