package record

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// WithMarker runs f with the recorded data marker of the Redis key ("" and 0 when none),
// holding a transaction-scoped advisory lock on the key until f returns, so a check and a
// restore never interleave their Redis write and their record; what f returns is recorded
// unless its gen is "" (internal/datamark).
func (q *Queries) WithMarker(ctx context.Context, key string, f func(gen string, n int64) (string, int64, error)) error {
	return pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('redis_marker:' || $1, 0))`, key); err != nil {
			return fmt.Errorf("record: lock data marker: %w", err)
		}
		var gen string
		var n int64
		err := tx.QueryRow(ctx, `SELECT gen, n FROM redis_markers WHERE key = $1`, key).Scan(&gen, &n)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("record: data marker: %w", err)
		}
		gen2, n2, err := f(gen, n)
		if err != nil || gen2 == "" {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO redis_markers (key, gen, n) VALUES ($1, $2, $3)
			ON CONFLICT (key) DO UPDATE SET gen = excluded.gen, n = excluded.n, updated_at = now()`, key, gen2, n2); err != nil {
			return fmt.Errorf("record: record data marker: %w", err)
		}
		return nil
	})
}
