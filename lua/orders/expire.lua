-- expire.lua: expire the given due reservations of ONE item. One script re-checks each entry's
-- due time and each order's state, returns stock and allowance, appends order.expired and
-- removes the entry, so a crashed expirer loses nothing and several expirers expire each order
-- once (docs/design.md, "The expirer"). (release.lua and changed.lua are prepended.)
-- Go caller: orders.Store.expireOrders (internal/orders/lifecycle.go).
-- KEYS[1] item hash  [2] orders hash  [3] held hash  [4] shard expiry zset
--   [5] shard outbox stream  [6] shard change log  [7] shard clock
--   [8] item payments hash (order id -> "payment id|state|event id|attempt")
-- ARGV[1] item id  [2] processing hold, whole ms 0..1e13 (0: none)  [3..] expiry index entries
--   of this item: "<item>.<first>-<last>" (a purchase batch, at most 256) or "<item>.<seq>";
--   1..1000 orders in all
-- Reply: {examined, expired, units_returned, expired order id...}
--   examined: given entries no longer due in the index (taken off or re-scored, by this call or
--   another since the caller read them; 0 while the item hash is missing: nothing written);
--   the others stay at the index's head. expired: orders moved reserved -> expired.
--   units_returned: their summed quantity.
-- A malformed argument is an error reply and writes nothing.

local item_id = ARGV[1]
if not item_id or item_id == '' then
  return redis.error_reply('ERR expire: missing item id')
end
local hold = tonumber(ARGV[2])
if not hold or hold < 0 or hold > 1e13 or hold ~= math.floor(hold) then
  return redis.error_reply('ERR expire: hold must be a whole number of ms, 0..1e13')
end
if #ARGV < 3 then
  return redis.error_reply('ERR expire: no entries')
end
local prefix = item_id .. '.'
local firsts, lasts = {}, {}
local named = 0
for i = 3, #ARGV do
  local e = ARGV[i]
  local a, b
  if string.sub(e, 1, #prefix) == prefix then
    local rest = string.sub(e, #prefix + 1)
    a = string.match(rest, '^(%d+)$')
    if a then
      b = a
    else
      a, b = string.match(rest, '^(%d+)%-(%d+)$')
    end
  end
  local first, last = tonumber(a), tonumber(b)
  if not first or not last or last < first or last - first >= 256 then
    return redis.error_reply('ERR expire: ' .. e .. ' is not an expiry entry of item ' .. item_id)
  end
  firsts[i], lasts[i] = first, last
  named = named + last - first + 1
end
-- Bounded: the script blocks Redis while it runs.
if named > 1000 then
  return redis.error_reply('ERR expire: the entries name more than 1000 orders')
end

if redis.call('EXISTS', KEYS[1]) == 0 then
  -- A restore is rebuilding the item (restore_begin.lua .. restore_finish.lua): writing now
  -- would create a partial item hash that the restore then overwrites with figures counting
  -- these orders reserved. The entries stay due; a later sweep expires them.
  return {0, 0, 0}
end

local now = now_int_ms()
local examined, expired, units = 0, 0, 0
local out = {0, 0, 0}
for i = 3, #ARGV do
  local e = ARGV[i]
  local due = tonumber(redis.call('ZSCORE', KEYS[4], e))
  if not due then
    -- Another expirer (or a payment's or cancel's removal of a single-order entry) took it off
    -- since the caller read it.
    examined = examined + 1
  elseif due <= now then -- by Redis TIME: an entry the caller's fast clock found due stays
    local oids = {e} -- a single order's entry is its id, as written
    if lasts[i] > firsts[i] then
      oids = {}
      for s = firsts[i], lasts[i] do
        oids[#oids + 1] = item_id .. '.' .. string.format('%d', s)
      end
    end
    local recs = redis.call('HMGET', KEYS[2], unpack(oids))
    local pays = nil
    if hold > 0 then
      pays = redis.call('HMGET', KEYS[8], unpack(oids))
    end
    -- A batch entry stays until it falls due whatever its orders do: orders no longer reserved
    -- (a payment or cancel won) are skipped, the others expired, and the entry goes once every
    -- order it names is settled.
    local open = false     -- an order open here by its own expiry (a restore's): the entry stays
    local held_until = nil -- the earliest end of a hold on an order whose payment is processing
    for j, oid in ipairs(oids) do
      local o = unpack_order(recs[j])
      if o and o.status == 'reserved' then
        local processing = pays and pays[j] and string.match(pays[j], '^[^|]*|processing|')
        if o.expires > now then
          open = true
        elseif processing and o.expires + hold > now then
          -- A debit on its way holds the reservation until expires_ms + hold: the provider decides.
          if not held_until or o.expires + hold < held_until then
            held_until = o.expires + hold
          end
        else
          units = units + release_order(KEYS[2], KEYS[3], KEYS[5], item_id, oid, o, 'expired', now)
          expired = expired + 1
          out[#out + 1] = oid
        end
      end
    end
    if not open and not held_until then
      redis.call('ZREM', KEYS[4], e)
      examined = examined + 1
    elseif not open then
      -- Left only for holds: re-scored to the earliest hold's end, not re-read every sweep.
      redis.call('ZADD', KEYS[4], held_until, e)
      examined = examined + 1 -- no longer due: off the index's head like one taken off
    end
  end
end
if expired > 0 then
  redis.call('HINCRBY', KEYS[1], 'stock_left', units)
  redis.call('HINCRBY', KEYS[1], 'reserved', -units)
  redis.call('HINCRBY', KEYS[1], 'version', 1)
  mark_changed(KEYS[6], KEYS[7], item_id)
end
out[1], out[2], out[3] = examined, expired, units
return out
