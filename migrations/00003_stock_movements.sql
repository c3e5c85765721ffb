-- +goose Up
-- Every change of an item's unsold stock, one row per event: adjusted (admin delta),
-- reserved (a purchase took quantity), returned (a cancel or expiry gave it back). Stock set
-- when an item is created is its items.stock_total, not a movement.
CREATE TABLE stock_movements (
    event_id    text PRIMARY KEY,
    item_id     text        NOT NULL,
    kind        text        NOT NULL CHECK (kind IN ('adjusted', 'reserved', 'returned')),
    delta       bigint      NOT NULL,
    order_id    text,
    stock_total bigint,
    at          timestamptz NOT NULL
);
CREATE INDEX stock_movements_item ON stock_movements (item_id, at);

-- +goose Down
DROP TABLE stock_movements;
