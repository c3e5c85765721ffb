-- +goose Up
-- When a reservation lapses unpaid, as the purchase script set it (order.reserved carries it),
-- so `reconciler restore` gives a restored reservation its own expiry instead of a new one.
-- Null for orders recorded before this column: restore then falls back to created_at plus
-- FLASHSALE_RESERVATION_TTL.
ALTER TABLE orders ADD COLUMN expires_at timestamptz;

-- +goose Down
ALTER TABLE orders DROP COLUMN expires_at;
