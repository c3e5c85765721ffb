-- +goose Up
-- One row per item. Attributes and stock_total are each set by the newest event of the item's
-- outbox stream that carries them (attr_pos / stock_pos = that entry's stream position), so a
-- re-published old event never overwrites a newer value.
CREATE TABLE items (
    id             text PRIMARY KEY,
    name           text        NOT NULL DEFAULT '',
    category       text        NOT NULL DEFAULT '',
    price_cents    bigint      NOT NULL DEFAULT 0,
    stock_total    bigint      NOT NULL DEFAULT 0,
    per_user_limit bigint      NOT NULL DEFAULT 1,
    starts_at      timestamptz,
    ends_at        timestamptz,
    attr_pos_ms    bigint      NOT NULL DEFAULT 0,
    attr_pos_seq   bigint      NOT NULL DEFAULT 0,
    stock_pos_ms   bigint      NOT NULL DEFAULT 0,
    stock_pos_seq  bigint      NOT NULL DEFAULT 0,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE items;
