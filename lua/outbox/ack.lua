-- outbox/ack.lua: acknowledge outbox entries Kafka has taken and drop them from the stream in
-- one step, so the stream's length is the backlog. Most go by XTRIM MINID, which frees whole
-- stream nodes; only ids the trim cannot reach yet are deleted one by one (XDEL is costly).
-- Go caller: outbox.Relay.publish (internal/outbox/relay.go).
-- KEYS[1] the outbox stream
-- ARGV[1] the relay's consumer group  [2..] the ids published (1 to 10,000), ascending (as
--   XREADGROUP and XAUTOCLAIM return them)
-- Reply: {entries acknowledged, entries trimmed, entries deleted beyond the trim}. Running it
--   twice is harmless.

-- id_less: stream id a sorts before b (as numbers: "9-0" sorts after "10-0" as strings).
local function id_less(a, b)
  local ams, aseq = string.match(a, '^(%d+)%-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)%-(%d+)$')
  ams, bms = tonumber(ams), tonumber(bms)
  return ams < bms or (ams == bms and tonumber(aseq) < tonumber(bseq))
end

local n = #ARGV - 1
if n < 1 or n > 10000 then
  return redis.error_reply('ERR outbox_ack: between 1 and 10000 ids')
end
for i = 2, #ARGV do
  if not string.match(ARGV[i], '^%d+%-%d+$') then
    return redis.error_reply('ERR outbox_ack: bad id ' .. ARGV[i])
  end
end
local acked = 0
for i = 2, #ARGV, 1000 do
  acked = acked + redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
-- The trim's floor: the group's oldest pending entry, or just past its last delivered one.
-- Entries go out in id order, so each one below it was delivered and acknowledged.
local floor
local pending = redis.call('XPENDING', KEYS[1], ARGV[1])
if pending[1] > 0 then
  floor = pending[2]
else
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local name, last
    for j = 1, #g, 2 do
      if g[j] == 'name' then
        name = g[j + 1]
      elseif g[j] == 'last-delivered-id' then
        last = g[j + 1]
      end
    end
    if name == ARGV[1] and last then
      local ms, seq = string.match(last, '^(%d+)%-(%d+)$')
      floor = ms .. '-' .. string.format('%d', tonumber(seq) + 1)
    end
  end
end
if not floor then
  return {acked, 0, 0}
end
local trimmed = redis.call('XTRIM', KEYS[1], 'MINID', floor)
-- The ids above the floor are this call's tail (ARGV ascends), usually none: just acknowledged,
-- they are deleted now rather than wait for a stuck relay.
local first = #ARGV + 1
while first > 2 and id_less(floor, ARGV[first - 1]) do
  first = first - 1
end
local deleted = 0
for i = first, #ARGV, 1000 do
  deleted = deleted + redis.call('XDEL', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
return {acked, trimmed, deleted}
