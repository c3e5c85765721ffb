-- +goose Up
-- Refunds and disputes of paid orders. An order refunded in full (by an admin or at the
-- provider) becomes 'refunded', which only follows 'paid' (rank 2); restocked is the units the
-- refund put back on sale (0: they stay sold, counted with the paid units). A payment keeps its
-- PaymentIntent and checkout attempt (flashsale_attempt) beside its session id, and when its
-- charge was disputed.
ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_status_check
    CHECK (status IN ('reserved', 'paid', 'cancelled', 'expired', 'refunded'));
ALTER TABLE orders ADD COLUMN restocked bigint NOT NULL DEFAULT 0 CHECK (restocked >= 0);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION order_status_rank(status text) RETURNS int
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE status WHEN 'reserved' THEN 0 WHEN 'refunded' THEN 2 ELSE 1 END;
-- +goose StatementEnd

ALTER TABLE payments ADD COLUMN payment_intent text;
ALTER TABLE payments ADD COLUMN attempt text;
ALTER TABLE payments ADD COLUMN disputed_at timestamptz;
CREATE INDEX payments_payment_intent ON payments (payment_intent) WHERE payment_intent IS NOT NULL;

-- +goose Down
DROP INDEX payments_payment_intent;
ALTER TABLE payments DROP COLUMN disputed_at;
ALTER TABLE payments DROP COLUMN attempt;
ALTER TABLE payments DROP COLUMN payment_intent;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION order_status_rank(status text) RETURNS int
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE status WHEN 'reserved' THEN 0 ELSE 1 END;
-- +goose StatementEnd
ALTER TABLE orders DROP COLUMN restocked;
ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_status_check
    CHECK (status IN ('reserved', 'paid', 'cancelled', 'expired'));
