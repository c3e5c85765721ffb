-- +goose Up
-- The marker of the data each Redis slot of record holds, as the reconciler last saw it
-- (internal/datamark): the generation a restore or the first adoption wrote, and the highest
-- count the replicas confirmed. A Redis marker gone, older, or of another generation than
-- this row says means Redis lost its data, even when every api that saw it has restarted.
CREATE TABLE redis_markers (
    key        text PRIMARY KEY,
    gen        text        NOT NULL,
    n          bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE redis_markers;
