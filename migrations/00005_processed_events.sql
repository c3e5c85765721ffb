-- +goose Up
-- The de-duplication ledger: an event is applied in the same transaction that inserts its
-- event_id here, so a re-delivered event (relay retry, consumer restart) changes nothing.
CREATE TABLE processed_events (
    event_id        text PRIMARY KEY,
    type            text        NOT NULL,
    kafka_partition int         NOT NULL,
    kafka_offset    bigint      NOT NULL,
    processed_at    timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE processed_events;
