-- purchase.lua: decide a batch of purchase attempts on ONE item (a single purchase is a batch
-- of one) and write everything they change in one atomic step, so nothing is half-done
-- (docs/design.md, "The purchase script"). gcra.lua and changed.lua are prepended.
-- Go caller: inventory.Store.runBatch (internal/inventory/purchase.go).
-- KEYS[1] item hash  [2] orders hash  [3] held hash  [4] shard expiry zset  [5] shard outbox
--   stream  [6] shard change log  [7] shard clock  [8] purchase rate-limit hash (user -> TAT)
--   [9] queue tickets hash (the waiting room)  [10] user orders hash (user -> seqs "3,17,42");
--   then per attempt i (1-based): [10+i] idempotency key (none: any item key, untouched)
-- ARGV[1] reservation ttl ms  [2] idempotency ttl ms (both integers 1..1e13)  [3] rate per
--   period (0 = no limit)  [4] period ms  [5] burst  [6] item id; then per attempt i:
--   [3+4i] user id  [4+4i] quantity  [5+4i] idempotency key ('' none)  [6+4i] the waiting-room
--   pass id the api verified ('' none). At most 256 attempts (FLASHSALE_PURCHASE_BATCH).
-- Reply: attempt i is out[4i-3 .. 4i] = letter, value, a, b (numbers stay integer replies);
--   then out[4n+1] = "stock_left|price_cents|created_ms|expires_ms" for the whole batch.
--     C seq       created order <item>.<seq>: the attempt's user and quantity, reserved, price,
--                 creation and expiry as in the batch's string
--     R order_id  replayed: a = the earlier order packed "user|quantity|price_cents|status|
--                 created_ms|expires_ms", b = -1 (the limiter is not reached)
--     N not_found  I invalid_request  S sale_not_started  E sale_ended (or archived)
--     Q queue_required  L rate_limited  X limit_exceeded  O sold_out: value 0
--   a, b: the limiter's figures, whole ms rounded up: L retry and reset; C, X, O remaining and
--   reset; -1, -1 when it did not run.
-- A malformed batch (bad counts or shared ARGV) is an error reply and writes nothing.

local ttl = tonumber(ARGV[1])
local idem_ttl = tonumber(ARGV[2])
local rate = tonumber(ARGV[3])
local period = tonumber(ARGV[4])
local burst = tonumber(ARGV[5])
local item_id = ARGV[6]
local n = #KEYS - 10
-- At most 256 attempts, so every gathered write stays within unpack's limits.
if n < 1 or n > 256 or n ~= math.floor(n) or #ARGV ~= 6 + 4 * n then
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
if rate > 0 and (not finite(period) or period <= 0 or not finite(burst) or burst < 1
    or period / rate * burst > 1e13) then
  return redis.error_reply('ERR purchase: bad period or burst')
end

local f = redis.call('HMGET', KEYS[1], 'stock_left', 'per_user_limit', 'price_cents',
  'starts_at', 'ends_at', 'seq', 'reserved', 'q_rate', 'version', 'term', 'archived_at')
local exists = f[1] ~= false
-- An archived item (archive.lua) is off sale for good: its attempts read as after the end.
local archived = (tonumber(f[11]) or 0) > 0
local left = tonumber(f[1]) or 0
local per_user = tonumber(f[2]) or 0
local price = f[3] or '0'
local starts = tonumber(f[4]) or 0
local ends = tonumber(f[5]) or 0
-- Order numbers: counted on in this node's own block (order_block, changed.lua), so an order id
-- made here never names an order a primary this node diverged from made.
local seq, term = order_block(tonumber(f[6]) or 0, f[10], n)
if not seq then
  return redis.error_reply('ERR purchase: the order numbers of this history are used up; restore the item')
end
local reserved = tonumber(f[7]) or 0
local version = tonumber(f[9]) or 0
local now = now_ms()
local now_int = math.floor(now)
-- Every order of the batch is created now and expires ttl later: formatted once, not per order,
-- and so is the part of the packed order after the user and quantity.
local now_s = string.format('%d', now_int)
local expires_s = string.format('%d', now_int + ttl)
local order_tail = '|' .. price .. '|reserved|' .. now_s .. '|' .. expires_s
local oid_prefix = item_id .. '.'

-- Waiting room ----------------------------------------------------------------------------
-- An item with a waiting room (q_rate > 0) sells only to an attempt whose pass is the user's
-- current, admitted, unexpired one. A created order spends it (ticket state 's'; '#spent'
-- counts it until queue/admit.lua sees its expiry); a refused attempt spends nothing.
local qkey = KEYS[9]
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

-- Quantities as the api sent them, each checked once per batch (a batch rarely holds more than
-- one): the checked string goes into the order and the outbox as it is, never reformatted.
local quantities = {}
local function quantity(s)
  local q = quantities[s]
  if q == nil then
    q = tonumber(s)
    if not (q and q >= 1 and q <= 1e9 and string.format('%d', q) == s) then
      q = false
    end
    quantities[s] = q
  end
  return q
end

-- sized(k): a table with k array slots from the start (Lua 5.1 has no table.new; one filled
-- from empty is resized log2(k) times). k <= 4n + 1 <= 1025, within #ARGV and unpack's limits.
-- The slots hold ARGV's strings until written: read up to the tables' own counters, never #.
local function sized(k)
  return {unpack(ARGV, 1, k)}
end

-- Writes to keys the whole batch shares are gathered here and sent as one command each at
-- the end; later attempts read earlier ones' effects from these tables. The batch's users,
-- each once, in slot order: allowances, order lists and TATs are read with one HMGET each.
local slot = {} -- user -> slot
local users, s_held, s_seqs, s_tat = sized(n), sized(n), sized(n), sized(n)
local s_ordered, s_limited = sized(n), sized(n) -- the allowance and order list / the TAT changed
local nu = 0
if exists then
  for i = 1, n do
    local u = ARGV[3 + 4 * i]
    if not slot[u] then
      nu = nu + 1
      slot[u] = nu
      users[nu] = u
    end
  end
  local hv = redis.call('HMGET', KEYS[3], unpack(users, 1, nu))
  local sv = redis.call('HMGET', KEYS[10], unpack(users, 1, nu))
  local tv = rate > 0 and redis.call('HMGET', KEYS[8], unpack(users, 1, nu))
  for k = 1, nu do
    s_held[k] = tonumber(hv[k]) or 0
    s_seqs[k] = sv[k]
    local v = tv and tv[k]
    -- A TAT is the 8 bytes of its double (struct '<d'): exact, neither printed nor parsed.
    -- One stored as text (13 or more characters) still reads.
    s_tat[k] = v and (#v == 8 and struct.unpack('<d', v) or tonumber(v)) or false
    s_ordered[k], s_limited[k] = false, false
  end
end
local orders_args, no = sized(2 * n), 0 -- order id, packed order; no values so far
local new_orders = {} -- order id -> packed, for a later replay in this batch (Idempotency-Key)
local first_seq = seq + 1 -- the batch's orders are first_seq .. seq
-- The outbox: one order.reserved entry for the whole batch (events.FromBatch), not one per
-- order: what its orders share (item, price, created, expires) is written once, then each
-- order's user and quantity; their sequence numbers run on from first_seq.
local batch_list, nb = sized(2 * n), 0
local out = sized(4 * n + 1)

-- Each attempt is decided in order and on its own: replay, sale window, waiting room, rate
-- limit, per-user limit, stock. Its reply is out[4i-3 .. 4i], numbers left unformatted
-- (formatting is paid per attempt; once.lua records integers as they are).
for i = 1, n do
  local a = 4 * i
  local user, qty_s, idem, pass = ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6]
  local qty = quantity(qty_s)
  local letter, value, rl1, rl2 = 'C', 0, -1, -1
  local prev = false
  if idem ~= '' then
    prev = redis.call('GET', KEYS[10 + i])
  end
  if prev then
    letter, value = 'R', prev
    rl1 = new_orders[prev] or redis.call('HGET', KEYS[2], prev) or ''
  elseif not exists then
    letter = 'N' -- left is 0
  elseif not qty or user == '' then
    letter = 'I'
  elseif now < starts then
    letter = 'S'
  elseif (ends > 0 and now >= ends) or archived then
    letter = 'E'
  elseif queued and not pass_ticket(user, pass) then -- waiting room
    letter = 'Q'
  else
    local k = slot[user]
    if rate > 0 then
      local ok, remaining, retry, reset, new_tat = gcra_step(s_tat[k] or nil, now, rate, period, burst, 1)
      if not ok then -- nothing remains (cost 1)
        letter, rl1, rl2 = 'L', retry, reset
      else
        rl1, rl2 = remaining, reset
        s_tat[k], s_limited[k] = new_tat, true
      end
    end
    if letter == 'L' then
      -- refused by the limiter: nothing else is checked
    elseif s_held[k] + qty > per_user then
      letter = 'X'
    elseif qty > left then
      letter = 'O'
    else
      seq = seq + 1
      left = left - qty
      reserved = reserved + qty
      local seq_s = string.format('%d', seq)
      local oid = oid_prefix .. seq_s
      local packed = user .. '|' .. qty_s .. order_tail
      orders_args[no + 1], orders_args[no + 2] = oid, packed
      no = no + 2
      s_held[k], s_ordered[k] = s_held[k] + qty, true
      if s_seqs[k] then
        s_seqs[k] = s_seqs[k] .. ',' .. seq_s
      else
        s_seqs[k] = seq_s
      end
      if idem ~= '' then
        new_orders[oid] = packed
        redis.call('SET', KEYS[10 + i], oid, 'PX', idem_ttl)
      end
      -- The batch's outbox entry (written once, below) lists it: user|quantity.
      batch_list[nb + 1], batch_list[nb + 2] = user, qty_s
      nb = nb + 2
      if queued then -- waiting room: the pass is spent and frees its place
        local q = pass_ticket(user, pass)
        redis.call('HSET', qkey, user, 's|' .. q[1] .. '|' .. q[2] .. '|' .. q[3])
        redis.call('HINCRBY', qkey, '#spent', 1)
      end
      value = seq
    end
  end
  out[a - 3], out[a - 2], out[a - 1], out[a] = letter, value, rl1, rl2
end
out[4 * n + 1] = string.format('%d', left) .. '|' .. price .. '|' .. now_s .. '|' .. expires_s

-- The users' changed TATs, allowances and order lists, one HSET each.
-- Every TAT stored is at most now + burst * period / rate (gcra_step), so the rate-limit hash
-- expires that long after its last write (never sooner than a TTL it has): by then every TAT
-- in it is past and reads as none. A refusal writes nothing.
local args, na = sized(2 * n), 0
for k = 1, nu do
  if s_limited[k] then
    args[na + 1], args[na + 2] = users[k], struct.pack('<d', s_tat[k])
    na = na + 2
  end
end
if na > 0 then
  redis.call('HSET', KEYS[8], unpack(args, 1, na))
  local keep = math.ceil(period / rate * burst) + 1
  if redis.call('PTTL', KEYS[8]) < keep then
    redis.call('PEXPIRE', KEYS[8], keep)
  end
end
if no > 0 then
  redis.call('XADD', KEYS[5], '*', 'type', 'order.reserved', 'item', item_id,
    'seq', string.format('%d', first_seq), 'p', price, 'c', now_s, 'e', expires_s,
    'b', table.concat(batch_list, '|', 1, nb))
  local user_seqs = sized(2 * n)
  na = 0
  for k = 1, nu do
    if s_ordered[k] then -- exactly the users given an order
      args[na + 1], args[na + 2] = users[k], string.format('%d', s_held[k])
      user_seqs[na + 1], user_seqs[na + 2] = users[k], s_seqs[k]
      na = na + 2
    end
  end
  redis.call('HSET', KEYS[2], unpack(orders_args, 1, no))
  redis.call('HSET', KEYS[3], unpack(args, 1, na))
  redis.call('HSET', KEYS[10], unpack(user_seqs, 1, na))
  -- One expiry member for the batch's orders, "<item>.<first>-<last>" ("<item>.<seq>" for one
  -- order): they share their expiry (docs/design.md, "Per-batch index entries").
  local member = item_id .. '.' .. first_seq
  if seq > first_seq then
    member = member .. '-' .. seq
  end
  redis.call('ZADD', KEYS[4], expires_s, member)
  redis.call('HSET', KEYS[1], 'stock_left', string.format('%d', left), 'reserved', string.format('%d', reserved),
    'seq', string.format('%d', seq), 'version', string.format('%d', version + 1), 'term', term)
  mark_changed(KEYS[6], KEYS[7], item_id)
end
return out
