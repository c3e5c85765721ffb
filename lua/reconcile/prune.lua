-- prune.lua: let final orders of ONE item leave Redis once Postgres keeps them (docs/design.md,
-- "Order retention"). One script re-checks each order against the record and Redis TIME and
-- removes its orders field, payments field and user orders entry together, so no reader sees
-- an order without its index entry or the reverse. The held and paidby hashes, stock figures, seq
-- and version stay (its units were settled when it became final); no event (Postgres has it).
-- Go caller: reconcile.Reconciler.pruneChunk (internal/reconcile/prune.go).
-- KEYS[1] orders hash  [2] payments hash  [3] the item's restore fence
--   [4] the item's restoring mark  [5] the item's user orders hash (user -> "3,17,42")
-- ARGV[1] item id  [2] fencing number of the pruning job (integer 1..2^53 - 1)
--   [3] idempotency window ms (integer 1..1e13)
-- then for order i (1..500): ARGV[2+2i] order id, ARGV[3+2i] the order as the record holds it,
--   "user|quantity|price_cents|status"
-- Reply: {state, outcome_1, ..., outcome_n}; state: ok | fenced (a newer restore wrote the
--   item) | restoring (a restore is rebuilding it); fenced and restoring do nothing, no outcomes.
--   outcome_i: pruned|<payment id> ('' when it had none) | gone (no longer in Redis: pruned
--   before, or lost) | open (reserved in Redis) | differs (other content than the record's, or
--   malformed) | young (created within the idempotency window by Redis TIME)
--   | payment (refunding, or its record malformed: the refund must find it)
-- Bad arguments: an error reply, nothing written.

local item_id = ARGV[1]
local fence = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local n = (#ARGV - 3) / 2
-- Bounded: the script blocks Redis while it runs.
if not item_id or item_id == '' or #KEYS ~= 5 or n < 1 or n > 500 or n ~= math.floor(n) then
  return redis.error_reply('ERR prune: KEYS/ARGV do not describe 1..500 orders of an item')
end
if not fence or not (fence >= 1 and fence <= 9007199254740991) or fence ~= math.floor(fence) then
  return redis.error_reply('ERR prune: bad fencing number')
end
if not window or not (window >= 1 and window <= 1e13) or window ~= math.floor(window) then
  return redis.error_reply('ERR prune: bad idempotency window')
end
local prefix = item_id .. '.'
for i = 1, n do
  local oid, rec = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  if string.sub(oid, 1, #prefix) ~= prefix or #oid == #prefix then
    return redis.error_reply('ERR prune: order id ' .. oid .. ' is not of item ' .. item_id)
  end
  if not string.match(rec, '^[^|]+|%d+|%d+|%a+$') then
    return redis.error_reply('ERR prune: bad record of order ' .. oid)
  end
end

if tonumber(redis.call('GET', KEYS[3]) or '0') > fence then
  return {'fenced'}
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  return {'restoring'}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- USER INDEX ------------------------------------------------------------------------------
-- The item's user orders hash lists the user's seqs ("3,17,42") (docs/design.md, "Per-batch
-- index entries"). Removing an order takes its seq out; the last one takes the field.
local function drop_from_user_index(oid, user)
  local seq = string.sub(oid, #prefix + 1)
  local list = redis.call('HGET', KEYS[5], user)
  local kept, found = {}, false
  if list then
    for s in string.gmatch(list, '[^,]+') do
      if s == seq then
        found = true
      else
        kept[#kept + 1] = s
      end
    end
  end
  if #kept > 0 then
    if found then
      redis.call('HSET', KEYS[5], user, table.concat(kept, ','))
    end
  elseif list then
    redis.call('HDEL', KEYS[5], user)
  end
end
-- -----------------------------------------------------------------------------------------

local out = {'ok'}
for i = 1, n do
  local oid, rec = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local rec_user = string.match(rec, '^([^|]+)|')
  local packed = redis.call('HGET', KEYS[1], oid)
  local outcome
  if not packed then
    -- Pruned before (its index entry went with it) or lost: an index entry left names nothing.
    drop_from_user_index(oid, rec_user)
    outcome = 'gone'
  else
    local user, qty, price, status, created =
      string.match(packed, '^([^|]*)|(%d+)|(%d+)|(%a+)|(%d+)|%d+$')
    if not user then
      outcome = 'differs'
    elseif status == 'reserved' then
      outcome = 'open'
    elseif user .. '|' .. qty .. '|' .. price .. '|' .. status ~= rec then
      outcome = 'differs'
    elseif tonumber(created) + window > now then
      outcome = 'young'
    else
      local pay = redis.call('HGET', KEYS[2], oid)
      local pid, state = '', nil
      if pay then
        pid, state = string.match(pay, '^([^|]*)|([^|]*)|')
      end
      -- A refunding payment keeps its order until refund_payment.lua recorded the refund. An
      -- open one goes with it: it was cancelled at the provider when the order ended.
      if pay and (not state or state == 'refunding') then
        outcome = 'payment'
      else
        redis.call('HDEL', KEYS[1], oid)
        if pay then
          redis.call('HDEL', KEYS[2], oid)
        end
        drop_from_user_index(oid, user)
        outcome = 'pruned|' .. pid
      end
    end
  end
  out[#out + 1] = outcome
end
return out
