package record

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// RunSummary is one reconciliation run in the history: when, how it ended, and how much
// drift it found (the whole report is GET /api/admin/reconciliation's, for the latest).
type RunSummary struct {
	ID           int64      `json:"id"`
	StartedAt    time.Time  `json:"started_at"`
	FinishedAt   *time.Time `json:"finished_at"` // null while running
	Status       string     `json:"status"`      // running | ok | drift | failed | abandoned
	FencingToken *int64     `json:"fencing_token"`
	Drift        int        `json:"drift"`      // differences found
	Unverified   int        `json:"unverified"` // items it could not verify
	Error        *string    `json:"error"`
}

// RecentRuns returns the newest n reconciliation runs, newest first, running ones included.
func (q *Queries) RecentRuns(ctx context.Context, n int) ([]RunSummary, error) {
	rows, _ := q.db.Query(ctx, `SELECT id, started_at, finished_at, status, fencing_token,
		CASE jsonb_typeof(drift->'drift') WHEN 'array' THEN jsonb_array_length(drift->'drift') ELSE 0 END,
		CASE jsonb_typeof(drift->'unverified') WHEN 'array' THEN jsonb_array_length(drift->'unverified') ELSE 0 END,
		error
		FROM reconciliation_runs ORDER BY id DESC LIMIT $1`, n)
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunSummary, error) {
		var r RunSummary
		err := row.Scan(&r.ID, &r.StartedAt, &r.FinishedAt, &r.Status, &r.FencingToken, &r.Drift, &r.Unverified, &r.Error)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("record: recent runs: %w", err)
	}
	return runs, nil
}

// RecentRunsReport adapts RecentRuns for the api's history route.
func (q *Queries) RecentRunsReport(ctx context.Context, n int) (any, error) {
	runs, err := q.RecentRuns(ctx, n)
	if runs == nil && err == nil {
		runs = []RunSummary{}
	}
	return runs, err
}
