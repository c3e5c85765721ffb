-- purchase.lua: reserve stock for a batch of purchase attempts on ONE item, atomically.
-- (gcra.lua and changed.lua are prepended.) A batch is how the api coalesces concurrent purchases of the same
-- item into one round trip; a single purchase is a batch of one. Each attempt is decided in
-- order and independently: idempotent replay, sale window, rate limit, per-user limit, stock.
-- Everything an attempt changes (stock, order, allowance, user index, expiry index,
-- idempotency key, outbox event) is written by this one script, so nothing is half-done.
--
-- KEYS[1] item hash   KEYS[2] orders hash   KEYS[3] held hash   KEYS[4] shard expiry zset
-- KEYS[5] shard outbox stream   KEYS[6] shard change log   KEYS[7] shard clock
-- then for attempt i (1-based): KEYS[5+3i] user's order index zset (the shard's),
--   KEYS[6+3i] idempotency key, KEYS[7+3i] user's purchase rate-limit key
-- ARGV[1] reservation ttl ms (integer 1..1e13)   ARGV[2] idempotency ttl ms (integer 1..1e13)
-- ARGV[3] rate per period (0 = no limit)   ARGV[4] period ms   ARGV[5] burst
-- ARGV[6] item id (for order ids and events)
-- then for attempt i: ARGV[4+3i] user id, ARGV[5+3i] quantity, ARGV[6+3i] idempotency key ('' none)
-- Waiting room (issue 17), a trailing block so the indices above do not move:
-- KEYS[#KEYS] the item's queue tickets hash (keyspace Item.QueueTickets)
-- then for attempt i: ARGV[6+3n+i] the pass id the api verified ('' none), n = attempts.
-- An item with a waiting room (item field q_rate > 0) sells only to an attempt whose pass is
-- this user's current, admitted, unexpired one; a created order spends it (ticket 's', and
-- '#spent' counts it until queue_admit.lua sees its expiry). A refused attempt spends nothing.
--
-- Reply: one array per attempt:
--   {outcome, order_id, packed_order, stock_left, rl_allowed, rl_remaining, rl_retry_ms, rl_reset_ms}
-- outcome: created | replayed | not_found | invalid_request | sale_not_started | sale_ended |
--          queue_required | rate_limited | limit_exceeded | sold_out
-- packed_order is "user|quantity|price_cents|status|created_ms|expires_ms" ('' when none).
-- The rl_* fields are strings ('' when the limiter is off or was not reached).
-- A malformed batch (bad counts or shared ARGV) is an error reply and writes nothing.

local ttl = tonumber(ARGV[1])
local idem_ttl = tonumber(ARGV[2])
local rate = tonumber(ARGV[3])
local period = tonumber(ARGV[4])
local burst = tonumber(ARGV[5])
local item_id = ARGV[6]
local n = (#KEYS - 8) / 3
if n < 1 or n ~= math.floor(n) or #ARGV ~= 6 + 4 * n then
  return redis.error_reply('ERR purchase: KEYS/ARGV do not describe a batch')
end
-- tonumber also reads 'nan', 'inf' and fractions. A ttl must be whole milliseconds that print
-- as an integer (PX, the packed order's expires_ms): a bad one would fail a write half-way
-- through an attempt, or pack an order nobody can read back. A non-finite rate or burst would
-- switch the limiter off.
local function finite(x) return x ~= nil and x == x and x > -math.huge and x < math.huge end
local function whole_ms(x) return finite(x) and x >= 1 and x <= 1e13 and x == math.floor(x) end
if not whole_ms(ttl) or not whole_ms(idem_ttl) or not finite(rate) or rate < 0 then
  return redis.error_reply('ERR purchase: bad ttl or rate')
end
if rate > 0 and (not finite(period) or period <= 0 or not finite(burst) or burst < 1) then
  return redis.error_reply('ERR purchase: bad period or burst')
end

local f = redis.call('HMGET', KEYS[1], 'stock_left', 'per_user_limit', 'price_cents',
  'starts_at', 'ends_at', 'seq', 'reserved', 'q_rate')
local exists = f[1] ~= false
local left = tonumber(f[1]) or 0
local per_user = tonumber(f[2]) or 0
local price = f[3] or '0'
local starts = tonumber(f[4]) or 0
local ends = tonumber(f[5]) or 0
local seq = tonumber(f[6]) or 0
local reserved = tonumber(f[7]) or 0
local now = now_ms()
local now_int = math.floor(now)
local changed = false
local out = {}

-- Waiting room (issue 17) ----------------------------------------------------------------
local qkey = KEYS[#KEYS]
local queued = (tonumber(f[8]) or 0) > 0
-- pass_ticket returns the user's ticket fields when pass is their live, unspent pass.
local function pass_ticket(user, pass)
  if pass == '' then return nil end
  local t = redis.call('HGET', qkey, user)
  if not t then return nil end
  local st, line, p, exp = string.match(t, '^(%a)|(%d+)|([^|]*)|(%d+)$')
  if st ~= 'a' or p ~= pass or not (tonumber(exp) > now) then return nil end
  return {line, p, exp}
end
-- ----------------------------------------------------------------------------------------

for i = 1, n do
  local ukey, ikey, rkey = KEYS[5 + 3 * i], KEYS[6 + 3 * i], KEYS[7 + 3 * i]
  local user, qty, idem = ARGV[4 + 3 * i], tonumber(ARGV[5 + 3 * i]), ARGV[6 + 3 * i]
  local pass = ARGV[6 + 3 * n + i] -- waiting room (issue 17)
  local reply
  local prev = false
  if idem ~= '' then
    prev = redis.call('GET', ikey)
  end
  if prev then
    reply = {'replayed', prev, redis.call('HGET', KEYS[2], prev) or '', left, '', '', '', ''}
  elseif not exists then
    reply = {'not_found', '', '', 0, '', '', '', ''}
  elseif not qty or qty < 1 or qty ~= math.floor(qty) or user == '' then
    reply = {'invalid_request', '', '', left, '', '', '', ''}
  elseif now < starts then
    reply = {'sale_not_started', '', '', left, '', '', '', ''}
  elseif ends > 0 and now >= ends then
    reply = {'sale_ended', '', '', left, '', '', '', ''}
  elseif queued and not pass_ticket(user, pass) then -- waiting room (issue 17)
    reply = {'queue_required', '', '', left, '', '', '', ''}
  else
    local ok, remaining, retry, reset = true, 0, 0, 0
    if rate > 0 then
      ok, remaining, retry, reset = gcra(rkey, now, rate, period, burst, 1)
    end
    local rl = {'', '', '', ''}
    if rate > 0 then
      rl = {ok and '1' or '0', tostring(remaining), ms(retry), ms(reset)}
    end
    local held = tonumber(redis.call('HGET', KEYS[3], user)) or 0
    if not ok then
      reply = {'rate_limited', '', '', left, rl[1], rl[2], rl[3], rl[4]}
    elseif held + qty > per_user then
      reply = {'limit_exceeded', '', '', left, rl[1], rl[2], rl[3], rl[4]}
    elseif qty > left then
      reply = {'sold_out', '', '', left, rl[1], rl[2], rl[3], rl[4]}
    else
      seq = seq + 1
      left = left - qty
      reserved = reserved + qty
      changed = true
      local oid = item_id .. '.' .. seq
      local expires = now_int + ttl
      local packed = user .. '|' .. qty .. '|' .. price .. '|reserved|' .. now_int .. '|' .. expires
      redis.call('HSET', KEYS[2], oid, packed)
      redis.call('HINCRBY', KEYS[3], user, qty)
      redis.call('ZADD', ukey, now_int, oid)
      redis.call('ZADD', KEYS[4], expires, oid)
      if idem ~= '' then
        redis.call('SET', ikey, oid, 'PX', idem_ttl)
      end
      redis.call('XADD', KEYS[5], '*', 'type', 'order.reserved', 'at', now_int, 'item', item_id,
        'order', oid, 'user', user, 'quantity', qty, 'price_cents', price, 'expires', expires)
      if queued then -- waiting room (issue 17): the pass is spent and frees its place
        local q = pass_ticket(user, pass)
        redis.call('HSET', qkey, user, 's|' .. q[1] .. '|' .. q[2] .. '|' .. q[3])
        redis.call('HINCRBY', qkey, '#spent', 1)
      end
      reply = {'created', oid, packed, left, rl[1], rl[2], rl[3], rl[4]}
    end
  end
  out[i] = reply
end

if changed then
  redis.call('HSET', KEYS[1], 'stock_left', left, 'reserved', reserved, 'seq', seq)
  redis.call('HINCRBY', KEYS[1], 'version', 1)
  mark_changed(KEYS[6], KEYS[7], item_id)
end
return out
