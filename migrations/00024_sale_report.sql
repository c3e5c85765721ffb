-- +goose Up
-- What the post-sale report reads besides orders, payments and stock_movements.
-- items: when the record first saw the item (a sale without starts_at starts then), when it
-- was archived (off sale for good, kept for the record and the reports) and its picture.
ALTER TABLE items
    ADD COLUMN created_at  timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN archived_at timestamptz,
    ADD COLUMN image_url   text;

-- One row per shopper who joined an item's waiting room (queue.joined, queue.admitted):
-- joined_at is the first join, admitted_at the first admission. A shopper whose pass expired
-- and who joined again stays one row: the report counts shoppers.
CREATE TABLE queue_entries (
    item_id     text        NOT NULL,
    user_id     text        NOT NULL,
    joined_at   timestamptz,
    admitted_at timestamptz,
    PRIMARY KEY (item_id, user_id)
);

-- Purchase attempts by outcome, per item, api instance and second (sale.tally). One row per
-- event: a tally is never merged with another, so a re-delivery (de-duplicated on event_id)
-- counts once.
CREATE TABLE sale_tallies (
    event_id         text PRIMARY KEY,
    item_id          text        NOT NULL,
    at               timestamptz NOT NULL,
    reserved         bigint      NOT NULL DEFAULT 0,
    sold_out         bigint      NOT NULL DEFAULT 0,
    limit_exceeded   bigint      NOT NULL DEFAULT 0,
    rate_limited     bigint      NOT NULL DEFAULT 0,
    sale_not_started bigint      NOT NULL DEFAULT 0,
    sale_ended       bigint      NOT NULL DEFAULT 0,
    queue_required   bigint      NOT NULL DEFAULT 0
);
CREATE INDEX sale_tallies_item ON sale_tallies (item_id, at);

-- +goose Down
DROP TABLE sale_tallies;
DROP TABLE queue_entries;
ALTER TABLE items DROP COLUMN image_url, DROP COLUMN archived_at, DROP COLUMN created_at;
