-- +goose Up
-- When the reconciler's pruning pass removed a final order from Redis (FLASHSALE_ORDER_RETENTION):
-- from then on this row alone keeps it. Null while Redis holds the order. Batch reconciliation
-- takes a pruned order's absence from Redis as expected, and restore does not bring it back
-- (its units still count in the item's figures and the user's allowance).
ALTER TABLE orders ADD COLUMN pruned_at timestamptz;
-- The pruning pass pages through final orders not yet pruned, oldest final change first; the
-- index holds only those, so it stays as small as Redis's own share of the orders.
CREATE INDEX orders_prunable ON orders (updated_at, id) WHERE pruned_at IS NULL AND status <> 'reserved';

-- +goose Down
DROP INDEX orders_prunable;
ALTER TABLE orders DROP COLUMN pruned_at;
