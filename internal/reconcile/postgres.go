package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgOrder is an order as the record holds it.
type pgOrder struct {
	user   string
	qty    int64
	status string
}

// pgCounters are an item's stock figures derived from the record.
type pgCounters struct {
	exists                bool
	total, reserved, paid int64
}

func (c pgCounters) left() int64 { return c.total - c.reserved - c.paid }

// add counts (sign 1) or uncounts (sign -1) an order in the sums; nil is no order.
func (c *pgCounters) add(o *pgOrder, sign int64) {
	if o == nil {
		return
	}
	switch o.status {
	case "reserved":
		c.reserved += sign * o.qty
	case "paid":
		c.paid += sign * o.qty
	}
}

// fence raises the job's stored fencing number to n inside tx, or returns ErrFenced when a
// larger number is stored. The row lock it takes serialises concurrent runners' writes.
func fence(ctx context.Context, tx pgx.Tx, job string, n int64) error {
	tag, err := tx.Exec(ctx, `INSERT INTO job_fences AS f (job, fencing_token) VALUES ($1, $2)
		ON CONFLICT (job) DO UPDATE SET fencing_token = excluded.fencing_token, updated_at = now()
		WHERE f.fencing_token <= excluded.fencing_token`, job, n)
	if err != nil {
		return fmt.Errorf("reconcile: fence: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w (fencing number %d)", ErrFenced, n)
	}
	return nil
}

// fenced runs f in a transaction that first checks and raises the fencing number.
func (r *Reconciler) fenced(ctx context.Context, n int64, f func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, LockName, n); err != nil {
			return err
		}
		return f(tx)
	})
}

// startRun records a run as running.
func (r *Reconciler) startRun(ctx context.Context, n int64, started time.Time) (int64, error) {
	var id int64
	err := r.fenced(ctx, n, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `INSERT INTO reconciliation_runs (started_at, status, fencing_token)
			VALUES ($1, 'running', $2) RETURNING id`, started, n).Scan(&id)
	})
	if err != nil {
		return 0, fmt.Errorf("reconcile: record run start: %w", err)
	}
	return id, nil
}

// finishRun stores the run's report (or its failure).
func (r *Reconciler) finishRun(ctx context.Context, id, n int64, rep *Report, runErr error) error {
	status := "ok"
	var drift []byte
	var errText *string
	if rep != nil {
		var err error
		if drift, err = json.Marshal(rep); err != nil {
			return err
		}
		if !rep.Clean() {
			status = "drift"
		}
	}
	if runErr != nil {
		status = "failed"
		s := runErr.Error()
		errText = &s
	}
	err := r.fenced(ctx, n, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE reconciliation_runs SET finished_at = now(), status = $2,
			drift = $3, error = $4 WHERE id = $1`, id, status, drift, errText)
		return err
	})
	if err != nil {
		return fmt.Errorf("reconcile: record run result: %w", err)
	}
	return nil
}

// pgItems returns every item id in the record.
func (r *Reconciler) pgItems(ctx context.Context) ([]string, error) {
	rows, _ := r.db.Query(ctx, `SELECT id FROM items`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reconcile: items: %w", err)
	}
	return ids, nil
}

// pgItemTotal returns the item's stock_total and whether the record has it.
func (r *Reconciler) pgItemTotal(ctx context.Context, id string) (int64, bool, error) {
	var total int64
	err := r.db.QueryRow(ctx, `SELECT stock_total FROM items WHERE id = $1`, id).Scan(&total)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("reconcile: item %s: %w", id, err)
	}
	return total, true, nil
}

// pgEachOrder streams the item's orders to f.
func (r *Reconciler) pgEachOrder(ctx context.Context, item string, f func(id string, o pgOrder)) error {
	rows, err := r.db.Query(ctx, `SELECT id, user_id, quantity, status FROM orders WHERE item_id = $1`, item)
	if err != nil {
		return fmt.Errorf("reconcile: orders of %s: %w", item, err)
	}
	defer rows.Close()
	var id string
	var o pgOrder
	for rows.Next() {
		if err := rows.Scan(&id, &o.user, &o.qty, &o.status); err != nil {
			return fmt.Errorf("reconcile: orders of %s: %w", item, err)
		}
		f(id, o)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reconcile: orders of %s: %w", item, err)
	}
	return nil
}

// pgState reads the item's counters and the given orders in one snapshot.
func (r *Reconciler) pgState(ctx context.Context, item string, ids []string) (pgCounters, map[string]pgOrder, error) {
	var c pgCounters
	orders := make(map[string]pgOrder, len(ids))
	err := pgx.BeginTxFunc(ctx, r.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var total *int64
		if err := tx.QueryRow(ctx, `SELECT (SELECT stock_total FROM items WHERE id = $1),
			coalesce(sum(quantity) FILTER (WHERE status = 'reserved'), 0),
			coalesce(sum(quantity) FILTER (WHERE status = 'paid'), 0)
			FROM orders WHERE item_id = $1`, item).Scan(&total, &c.reserved, &c.paid); err != nil {
			return err
		}
		if total != nil {
			c.exists, c.total = true, *total
		}
		if len(ids) == 0 {
			return nil
		}
		rows, err := tx.Query(ctx, `SELECT id, user_id, quantity, status FROM orders WHERE id = ANY($1)`, ids)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var o pgOrder
			if err := rows.Scan(&id, &o.user, &o.qty, &o.status); err != nil {
				return err
			}
			orders[id] = o
		}
		return rows.Err()
	})
	if err != nil {
		return c, nil, fmt.Errorf("reconcile: record of %s: %w", item, err)
	}
	return c, orders, nil
}

// LatestRun is the newest finished run as stored.
type LatestRun struct {
	ID           int64           `json:"id"`
	StartedAt    time.Time       `json:"started_at"`
	FinishedAt   time.Time       `json:"finished_at"`
	Status       string          `json:"status"` // ok | drift | failed
	FencingToken int64           `json:"fencing_token"`
	Report       json.RawMessage `json:"report"`
	Error        string          `json:"error,omitempty"`
}

// Latest returns the newest finished run (by fencing number: a stale runner's late result
// never hides a newer one), or nil when none has finished yet.
func Latest(ctx context.Context, db *pgxpool.Pool) (*LatestRun, error) {
	var l LatestRun
	var fenceN *int64
	var errText *string
	var drift []byte
	err := db.QueryRow(ctx, `SELECT id, started_at, finished_at, status, fencing_token, drift, error
		FROM reconciliation_runs WHERE finished_at IS NOT NULL
		ORDER BY fencing_token DESC NULLS LAST, id DESC LIMIT 1`).
		Scan(&l.ID, &l.StartedAt, &l.FinishedAt, &l.Status, &fenceN, &drift, &errText)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reconcile: latest run: %w", err)
	}
	if fenceN != nil {
		l.FencingToken = *fenceN
	}
	if errText != nil {
		l.Error = *errText
	}
	if len(drift) > 0 {
		l.Report = drift
	} else {
		l.Report = json.RawMessage("null")
	}
	return &l, nil
}

// LatestReport adapts Latest for the api's report route: the newest run, or nil before any.
func LatestReport(db *pgxpool.Pool) func(ctx context.Context) (any, error) {
	return func(ctx context.Context) (any, error) {
		l, err := Latest(ctx, db)
		if err != nil || l == nil {
			return nil, err
		}
		return l, nil
	}
}
