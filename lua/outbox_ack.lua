-- outbox_ack.lua: acknowledge outbox entries Kafka has taken and drop every entry that no
-- consumer of the relay's group still needs, in one step. The relay calls it after each
-- publish instead of XACK + XDEL of each id: XTRIM MINID frees whole stream nodes, while XDEL
-- looks every id up and only flags it, which was most of the relay's Redis time.
--
-- KEYS[1] the outbox stream
-- ARGV[1] the relay's consumer group   ARGV[2..] the ids published (1 to 10,000)
-- Reply: {entries acknowledged, entries trimmed}
--
-- What may go: every entry below the group's oldest pending entry or, with none pending,
-- up to the last entry delivered to the group. XREADGROUP hands new entries out in id order,
-- so every entry below either was delivered, and is no longer pending: it was acknowledged,
-- i.e. published. An entry another relay still holds stays until it acknowledges it (and
-- that call trims what is then free); meanwhile XLEN counts the published entries above it as
-- backlog. Running it twice is harmless.

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
  return {acked, 0}
end
return {acked, redis.call('XTRIM', KEYS[1], 'MINID', floor)}
