-- +goose Up
-- Orders as the api reported them. status only moves forward (reserved -> paid | cancelled |
-- expired): order_status_rank is what the reconciler's upsert compares, so a late
-- order.reserved never overwrites paid.
CREATE TABLE orders (
    id          text PRIMARY KEY,
    item_id     text        NOT NULL,
    user_id     text        NOT NULL,
    quantity    bigint      NOT NULL CHECK (quantity > 0),
    price_cents bigint      NOT NULL CHECK (price_cents >= 0),
    status      text        NOT NULL CHECK (status IN ('reserved', 'paid', 'cancelled', 'expired')),
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
CREATE INDEX orders_item_status ON orders (item_id, status);
CREATE INDEX orders_user ON orders (user_id);

-- +goose StatementBegin
CREATE FUNCTION order_status_rank(status text) RETURNS int
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE status WHEN 'reserved' THEN 0 ELSE 1 END;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION order_status_rank(text);
DROP TABLE orders;
