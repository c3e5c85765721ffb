-- queue/join.lua: a batch of joins to ONE item's waiting room (the api coalesces concurrent
-- joins as it does purchases). One script so accepted joins are numbered 1, 2, 3... with no
-- gaps however many arrive at once. Joining again returns the same ticket; only a shopper whose
-- pass expired unused joins again, at the back. (queue/ticket.lua is prepended.)
-- Go caller: queue.Store.runJoins (internal/queue/redis.go).
-- KEYS[1] item hash  [2] line zset  [3] tickets hash  [4] line state hash  [5] shard outbox stream
-- ARGV[1] item id; for join i (1-based): ARGV[2i] user id, ARGV[2i+1] random score, an
--   integer in [0, 2^52) from the api's CSPRNG (used only for a join before the start)
-- Reply: {now_ms, admitted (shoppers admitted so far: the line's head), per join {outcome,
--   ticket}...}; outcome: joined | existing | not_found | no_queue | sale_ended; ticket: the
--   packed ticket (queue/ticket.lua), '' unless joined or existing
-- Malformed arguments are an error reply and write nothing.

local item = ARGV[1]
local n = (#ARGV - 1) / 2
if n < 1 or n ~= math.floor(n) or not string.match(item, '^[%w_-]+$') or #item > 64 then
  return redis.error_reply('ERR queue_join: ARGV does not describe a batch')
end
-- The score must be plain decimal digits: ZADD is sent the string, and tonumber also reads
-- forms ZADD refuses (' 5'), which would fail the batch half-way through its writes.
for i = 1, n do
  local user, score = ARGV[2 * i], tonumber(ARGV[2 * i + 1])
  if not string.match(user, '^[%w_-]+$') or #user > 64 or not string.match(ARGV[2 * i + 1], '^%d+$')
    or not score or score >= AFTER_START then
    return redis.error_reply('ERR queue_join: bad user or score')
  end
end

local now = now_ms()
local f = redis.call('HMGET', KEYS[1], 'stock_total', 'starts_at', 'ends_at', 'q_rate', 'archived_at')
local st = redis.call('HMGET', KEYS[4], 'pre', 'seq', 'popped')
local pre, seq, popped = tonumber(st[1]) or 0, tonumber(st[2]) or 0, tonumber(st[3]) or 0
local starts, ends = tonumber(f[2]) or 0, tonumber(f[3]) or 0
local common
if f[1] == false then
  common = 'not_found'
elseif (tonumber(f[4]) or 0) <= 0 then
  common = 'no_queue'
elseif (ends > 0 and now >= ends) or (tonumber(f[5]) or 0) > 0 then
  common = 'sale_ended' -- or archived: off sale for good
end

local out = {now, popped}
local pre0, seq0 = pre, seq
for i = 1, n do
  local user = ARGV[2 * i]
  local reply
  if common then
    reply = {common, ''}
  else
    local t = redis.call('HGET', KEYS[3], user)
    local s, _, _, exp
    if t then
      s, _, _, exp = ticket_unpack(t)
    end
    if s and (s == 'w' or s == 's' or (s == 'a' and exp > now)) then
      reply = {'existing', t}
    else
      -- New, or a pass that expired unused: (re)join.
      local packed
      if now < starts then
        pre = pre + 1
        redis.call('ZADD', KEYS[2], ARGV[2 * i + 1], user)
        packed = ticket_pack('w', 0, '', 0)
      else
        seq = seq + 1
        local line = pre + seq
        redis.call('ZADD', KEYS[2], string.format('%.0f', AFTER_START + line), user)
        packed = ticket_pack('w', line, '', 0)
      end
      redis.call('HSET', KEYS[3], user, packed)
      -- queue.joined: the post-sale report's funnel and waits.
      redis.call('XADD', KEYS[5], '*', 'type', 'queue.joined', 'at', now, 'item', item, 'user', user)
      reply = {'joined', packed}
    end
  end
  out[2 + i] = reply
end
if pre ~= pre0 or seq ~= seq0 then
  redis.call('HSET', KEYS[4], 'pre', pre, 'seq', seq)
end
return out
