-- +goose Up
-- Payments the provider took, as the api's events report them: order.paid with a payment_id
-- (the payment paid its order) and payment.refunded (it succeeded for an order already expired
-- or cancelled, and was refunded). status only moves forward (succeeded -> refunded), so a
-- late order.paid never overwrites a refund. Every succeeded payment is exactly one paid order
-- or one refund: the batch reconciliation checks this table against orders.
CREATE TABLE payments (
    id             text PRIMARY KEY,
    order_id       text        NOT NULL,
    provider       text        NOT NULL,
    amount_cents   bigint      NOT NULL CHECK (amount_cents >= 0),
    status         text        NOT NULL CHECK (status IN ('succeeded', 'refunded')),
    refunded_cents bigint      NOT NULL DEFAULT 0 CHECK (refunded_cents >= 0),
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL
);
CREATE INDEX payments_order ON payments (order_id);

-- +goose Down
DROP TABLE payments;
