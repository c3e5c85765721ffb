-- +goose Up
-- Batch reconciliation runs (Redis versus this record). fencing_token orders runs so a stale
-- runner cannot overwrite a newer run's result.
CREATE TABLE reconciliation_runs (
    id            bigserial PRIMARY KEY,
    started_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    status        text        NOT NULL DEFAULT 'running',
    fencing_token bigint,
    drift         jsonb,
    error         text
);
CREATE INDEX reconciliation_runs_started ON reconciliation_runs (started_at DESC);

-- +goose Down
DROP TABLE reconciliation_runs;
