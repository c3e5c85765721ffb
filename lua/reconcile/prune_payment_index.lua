-- prune_payment_index.lua: remove a pruned order's payment id index entry (keyspace
-- Space.PaymentOrder). The index has its own hash tag (the payment id alone names it), so it
-- cannot go in prune.lua's call in the item's slot; the pruning pass runs this after prune.lua
-- removed the order. Comparing and deleting is one step, so an entry that names another order
-- (a provider that reused a payment id: IndexPayment never overwrites it) stays.
-- An entry left behind by a pass that stopped in between still expires with its TTL.
--
-- Go caller: reconcile.Reconciler.prunePage (internal/reconcile/prune.go).
-- KEYS[1] the payment's index key
-- ARGV[1] the pruned order's id
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
