-- minimal_purchase.lua: the bench's "simple service" (cmd/bench/minimal.go), not part of
-- flashsale. It is what a shop would write first and compare flashsale with: one EVALSHA per
-- purchase request and four writes (stock, order number, order, the user's count), with no
-- auth, rate limit, outbox, idempotency, reservation expiry or call record.
--
-- KEYS[1] item hash (stock, seq)   KEYS[2] orders hash (seq -> "user|quantity")
-- KEYS[3] units bought per user (hash user -> units)
-- ARGV[1] user id   ARGV[2] quantity (integer >= 1)
-- Reply: {order number, stock left}; {0, stock left} when the stock does not cover it.
local qty = tonumber(ARGV[2])
if not qty or qty < 1 or qty ~= math.floor(qty) or ARGV[1] == '' then
  return redis.error_reply('ERR minimal_purchase: bad user or quantity')
end
local left = tonumber(redis.call('HGET', KEYS[1], 'stock')) or 0
if left < qty then
  return {0, left}
end
left = redis.call('HINCRBY', KEYS[1], 'stock', -qty)
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('HSET', KEYS[2], seq, ARGV[1] .. '|' .. qty)
redis.call('HINCRBY', KEYS[3], ARGV[1], qty)
return {seq, left}
