-- +goose Up
-- Messages the reconciler could not apply (malformed or invalid events), parked for an
-- operator; the consumer moves on. One row per topic offset, so a re-delivery parks it once.
CREATE TABLE dead_letters (
    id              bigserial PRIMARY KEY,
    topic           text        NOT NULL,
    kafka_partition int         NOT NULL,
    kafka_offset    bigint      NOT NULL,
    key             bytea,
    value           bytea,
    error           text        NOT NULL,
    received_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (topic, kafka_partition, kafka_offset)
);

-- +goose Down
DROP TABLE dead_letters;
