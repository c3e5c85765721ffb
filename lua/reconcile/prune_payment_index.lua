-- prune_payment_index.lua: remove a pruned order's payment id index entry (keyspace
-- Space.PaymentOrder) after prune.lua removed the order; the index has its own hash tag, so it
-- cannot be part of that call. One script so an entry naming another order (a provider that
-- reused a payment id) stays. One left by a pass that stopped in between expires with its TTL.
-- Go caller: reconcile.Reconciler.prunePage (internal/reconcile/prune.go).
-- KEYS[1] the payment's index key  ARGV[1] the pruned order's id
-- Reply: 1 removed, 0 none or another order's. Bad arguments: an error reply, nothing written.

local oid = ARGV[1]
if not oid or oid == '' then
  return redis.error_reply('ERR prune_payment_index: missing order id')
end
if redis.call('GET', KEYS[1]) ~= oid then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
