-- +goose Up
-- The newest fencing number each cluster-wide job (batch reconciliation, restore) has written
-- with. A run's writes first raise this row in the same transaction; a runner whose number is
-- lower (it stalled past its Redis lock's TTL and another runner took over) updates no row and
-- its writes are refused. The row lock also serialises two runners' writes.
CREATE TABLE job_fences (
    job           text PRIMARY KEY,
    fencing_token bigint      NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE job_fences;
