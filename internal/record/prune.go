package record

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PrunableOrder is a final order the record holds that Redis may let go of: what the pruning
// pass sends to Redis to be compared with the order there before it is removed.
type PrunableOrder struct {
	ID, Item, User, Status string
	Qty, Price             int64
	// Updated is when the order became final (its newest change), the key pages are read by.
	Updated time.Time
}

// PruneCursor is where a page of PrunableOrders ends: the next page starts after it. The zero
// cursor starts at the beginning.
type PruneCursor struct {
	Updated time.Time
	ID      string
}

// PrunableOrders returns up to limit final orders not yet pruned that became final at or
// before finalBefore and were created at or before createdBefore, after the cursor, oldest
// final change first (the orders_prunable index), and the cursor of the page's last order.
func (q *Queries) PrunableOrders(ctx context.Context, finalBefore, createdBefore time.Time, after PruneCursor, limit int) ([]PrunableOrder, PruneCursor, error) {
	rows, _ := q.db.Query(ctx, `SELECT id, item_id, user_id, status, quantity, price_cents, updated_at
		FROM orders
		WHERE pruned_at IS NULL AND status <> 'reserved' AND updated_at <= $1 AND created_at <= $2
			AND (updated_at, id) > ($3, $4)
		ORDER BY updated_at, id LIMIT $5`, finalBefore, createdBefore, after.Updated, after.ID, limit)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PrunableOrder, error) {
		var o PrunableOrder
		err := row.Scan(&o.ID, &o.Item, &o.User, &o.Status, &o.Qty, &o.Price, &o.Updated)
		return o, err
	})
	if err != nil {
		return nil, after, fmt.Errorf("record: prunable orders: %w", err)
	}
	if len(out) > 0 {
		last := out[len(out)-1]
		after = PruneCursor{Updated: last.Updated, ID: last.ID}
	}
	return out, after, nil
}

// MarkPruned records that Redis no longer holds these orders, fenced by the pruning job's
// number n (a runner that stalled past its lock writes nothing). An order marked before keeps
// its first time.
func (q *Queries) MarkPruned(ctx context.Context, job string, n int64, ids []string, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	err := q.fenced(ctx, job, n, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE orders SET pruned_at = $2 WHERE id = ANY($1) AND pruned_at IS NULL`, ids, at)
		return err
	})
	if err != nil {
		return fmt.Errorf("record: mark pruned: %w", err)
	}
	return nil
}
