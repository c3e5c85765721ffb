package record

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Queries is the record's read side and its fenced job writes, over a small pgx pool: what
// batch reconciliation, restore and the api's report route need. Packages that use it declare
// the methods they need as an interface of their own.
type Queries struct{ db *pgxpool.Pool }

// ErrFenced means a newer job run has written since this one took its fencing number.
var ErrFenced = errors.New("a newer run has taken over; this run's writes are refused")

// OpenQueries connects a small pool to dsn without touching the server (the first query
// dials), so a process that only sometimes needs Postgres starts without it.
func OpenQueries(dsn string) (*Queries, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("record: postgres dsn: %w", err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("record: postgres: %w", err)
	}
	return &Queries{db: pool}, nil
}

// Close closes the pool.
func (q *Queries) Close() { q.db.Close() }

// OrderState is an order as the record holds it, for comparisons.
type OrderState struct {
	User   string
	Qty    int64
	Price  int64 // price_cents
	Status string
	// Created is created_at, Updated the time of its newest change (for a final order: when
	// it became final); Pruned says the pruning pass removed it from Redis (pruned_at is set).
	Created, Updated time.Time
	Pruned           bool
	// FromReservation says Created is the order's own creation, written by its order.reserved
	// (expires_at is set by it alone), not the time of a later event recorded first.
	FromReservation bool
	// Restocked is the units a refund put back on sale; a refunded order's other units stay
	// sold (SoldUnits).
	Restocked int64
}

// SoldUnits is how many of the order's units are out of stock for good: a paid order's, and a
// refunded one's that the refund did not put back on sale.
func (o OrderState) SoldUnits() int64 {
	switch o.Status {
	case "paid":
		return o.Qty
	case "refunded":
		return max(o.Qty-o.Restocked, 0)
	}
	return 0
}

// orderStateCols selects an order's id and OrderState in scanOrderState's order.
const orderStateCols = `id, user_id, quantity, price_cents, status, created_at, updated_at, pruned_at IS NOT NULL, expires_at IS NOT NULL, restocked`

func scanOrderState(row pgx.Row, id *string, o *OrderState) error {
	return row.Scan(id, &o.User, &o.Qty, &o.Price, &o.Status, &o.Created, &o.Updated, &o.Pruned, &o.FromReservation, &o.Restocked)
}

// ItemCounters are an item's stock figures derived from the record, with its attributes.
type ItemCounters struct {
	Exists                bool
	Total, Reserved, Paid int64
	Attrs                 ItemAttrs
}

// ItemAttrs are an item's attributes as the item hash in Redis holds them (times in unix ms,
// 0 = none), for comparisons.
type ItemAttrs struct {
	Name, Category       string
	Price, PerUser       int64
	StartsAtMs, EndsAtMs int64
}

// itemAttrsSQL selects an item's stock_total and attributes in ItemAttrs' terms.
const itemAttrsSQL = `SELECT stock_total, name, category, price_cents, per_user_limit,
	coalesce((extract(epoch FROM starts_at) * 1000)::bigint, 0),
	coalesce((extract(epoch FROM ends_at) * 1000)::bigint, 0) FROM items WHERE id = $1`

func scanItemAttrs(row pgx.Row, total *int64, a *ItemAttrs) error {
	return row.Scan(total, &a.Name, &a.Category, &a.Price, &a.PerUser, &a.StartsAtMs, &a.EndsAtMs)
}

// fence raises the job's stored fencing number to n inside tx, or returns ErrFenced when a
// larger number is stored. The row lock it takes serialises concurrent runners' writes.
func fence(ctx context.Context, tx pgx.Tx, job string, n int64) error {
	tag, err := tx.Exec(ctx, `INSERT INTO job_fences AS f (job, fencing_token) VALUES ($1, $2)
		ON CONFLICT (job) DO UPDATE SET fencing_token = excluded.fencing_token, updated_at = now()
		WHERE f.fencing_token <= excluded.fencing_token`, job, n)
	if err != nil {
		return fmt.Errorf("record: fence: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w (fencing number %d)", ErrFenced, n)
	}
	return nil
}

func (q *Queries) fenced(ctx context.Context, job string, n int64, f func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, job, n); err != nil {
			return err
		}
		return f(tx)
	})
}

// RaiseFence stores n as the job's fencing number, or returns ErrFenced when a larger one is
// stored: a runner that stalled past its lock can no longer write after this.
func (q *Queries) RaiseFence(ctx context.Context, job string, n int64) error {
	return q.fenced(ctx, job, n, func(pgx.Tx) error { return nil })
}

// MaxFence is the largest fencing number the job has written with (0 for none).
func (q *Queries) MaxFence(ctx context.Context, job string) (int64, error) {
	var n int64
	if err := q.db.QueryRow(ctx, `SELECT COALESCE(MAX(fencing_token), 0) FROM job_fences WHERE job = $1`, job).Scan(&n); err != nil {
		return 0, fmt.Errorf("record: fencing floor of %s: %w", job, err)
	}
	return n, nil
}

// RunAbandoned is the status of a run whose runner stopped before finishing (it crashed, or
// lost the lock and had its result refused): the next run closes it when it starts.
const RunAbandoned = "abandoned"

// StartRun records a reconciliation run as running, fenced by n, and closes as abandoned every
// older run still running: the lock is exclusive and fencing numbers only grow, so a run with
// a smaller number can no longer finish (its result would be refused), and without this a
// runner killed mid-run would leave its row running forever.
func (q *Queries) StartRun(ctx context.Context, job string, n int64, started time.Time) (int64, error) {
	var id int64
	err := q.fenced(ctx, job, n, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO reconciliation_runs (started_at, status, fencing_token)
			VALUES ($1, 'running', $2) RETURNING id`, started, n).Scan(&id); err != nil {
			return err
		}
		// fencing_token < n, besides the fence above: a stale runner never closes a newer run.
		_, err := tx.Exec(ctx, `UPDATE reconciliation_runs SET status = $1, finished_at = now(),
			error = format('the runner stopped before finishing (crash or lost lock); superseded by run %s', $2::bigint)
			WHERE status = 'running' AND fencing_token < $3`, RunAbandoned, id, n)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("record: run start: %w", err)
	}
	return id, nil
}

// FinishRun stores a run's status (ok | drift | failed), report and error, fenced by n.
// (A run closed as abandoned stays so: a newer run started, so n is refused.)
func (q *Queries) FinishRun(ctx context.Context, job string, id, n int64, status string, drift []byte, errText *string) error {
	err := q.fenced(ctx, job, n, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE reconciliation_runs SET finished_at = now(), status = $2,
			drift = $3, error = $4 WHERE id = $1`, id, status, drift, errText)
		return err
	})
	if err != nil {
		return fmt.Errorf("record: run result: %w", err)
	}
	return nil
}

// ItemIDs returns every item id in the record.
func (q *Queries) ItemIDs(ctx context.Context) ([]string, error) {
	rows, _ := q.db.Query(ctx, `SELECT id FROM items`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("record: items: %w", err)
	}
	return ids, nil
}

// ItemTotal returns the item's stock_total and attributes, and whether the record has it.
func (q *Queries) ItemTotal(ctx context.Context, id string) (int64, ItemAttrs, bool, error) {
	var total int64
	var a ItemAttrs
	err := scanItemAttrs(q.db.QueryRow(ctx, itemAttrsSQL, id), &total, &a)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, a, false, nil
	}
	if err != nil {
		return 0, a, false, fmt.Errorf("record: item %s: %w", id, err)
	}
	return total, a, true, nil
}

// EachOrder streams the item's orders to f.
func (q *Queries) EachOrder(ctx context.Context, item string, f func(id string, o OrderState)) error {
	rows, err := q.db.Query(ctx, `SELECT `+orderStateCols+` FROM orders WHERE item_id = $1`, item)
	if err != nil {
		return fmt.Errorf("record: orders of %s: %w", item, err)
	}
	defer rows.Close()
	var id string
	var o OrderState
	for rows.Next() {
		if err := scanOrderState(rows, &id, &o); err != nil {
			return fmt.Errorf("record: orders of %s: %w", item, err)
		}
		f(id, o)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("record: orders of %s: %w", item, err)
	}
	return nil
}

// ItemState reads the item's counters and the given orders in one snapshot.
func (q *Queries) ItemState(ctx context.Context, item string, ids []string) (ItemCounters, map[string]OrderState, error) {
	var c ItemCounters
	orders := make(map[string]OrderState, len(ids))
	err := pgx.BeginTxFunc(ctx, q.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(quantity) FILTER (WHERE status = 'reserved'), 0),
			coalesce(sum(quantity) FILTER (WHERE status = 'paid'), 0)
				+ coalesce(sum(GREATEST(quantity - restocked, 0)) FILTER (WHERE status = 'refunded'), 0)
			FROM orders WHERE item_id = $1`, item).Scan(&c.Reserved, &c.Paid); err != nil {
			return err
		}
		switch err := scanItemAttrs(tx.QueryRow(ctx, itemAttrsSQL, item), &c.Total, &c.Attrs); {
		case err == nil:
			c.Exists = true
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		rows, err := tx.Query(ctx, `SELECT `+orderStateCols+` FROM orders WHERE id = ANY($1)`, ids)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var o OrderState
			if err := scanOrderState(rows, &id, &o); err != nil {
				return err
			}
			orders[id] = o
		}
		return rows.Err()
	})
	if err != nil {
		return c, nil, fmt.Errorf("record: state of %s: %w", item, err)
	}
	return c, orders, nil
}

// ItemRecord is an item with its orders, as restore rebuilds it.
type ItemRecord struct {
	Name, Category               string
	Price, Total, PerUser        int64
	StartsAt, EndsAt             *time.Time
	ArchivedAt                   *time.Time // nil: on sale
	ImageURL                     string     // "" for none
	AttrMs, AttrSeq, StMs, StSeq int64      // stream positions of the newest attribute and stock events
	Orders                       []OrderRecord
}

// OrderRecord is one order as restore rebuilds it.
type OrderRecord struct {
	ID, User, Status string
	Qty, Price       int64
	Created, Updated time.Time
	Expires          *time.Time   // null for orders recorded before the column
	Pruned           bool         // the pruning pass removed it from Redis: restore leaves it out
	Restocked        int64        // units a refund put back on sale
	Payment          *PaymentLink // the order's payment as restore brings it back; nil for none
}

// PaymentLink is an order's payment in the record: the one that paid it (or was refunded for
// it), else its latest attempt opened.
type PaymentLink struct {
	ID            string // the Checkout Session (the order's payment_id)
	Status        string // the payments row's: open | succeeded | refunded
	PaymentIntent string // "" while unknown
	Attempt       string // the flashsale_attempt, "" for a payment recorded without it
	Disputed      bool
}

// SoldUnits is as OrderState's.
func (o OrderRecord) SoldUnits() int64 {
	return OrderState{Status: o.Status, Qty: o.Qty, Restocked: o.Restocked}.SoldUnits()
}

// Item reads one item and its orders; ok is false when the record has no such item.
func (q *Queries) Item(ctx context.Context, id string) (it ItemRecord, ok bool, err error) {
	err = q.db.QueryRow(ctx, `SELECT name, category, price_cents, stock_total, per_user_limit,
		starts_at, ends_at, archived_at, coalesce(image_url, ''), attr_pos_ms, attr_pos_seq, stock_pos_ms, stock_pos_seq
		FROM items WHERE id = $1`, id).
		Scan(&it.Name, &it.Category, &it.Price, &it.Total, &it.PerUser, &it.StartsAt, &it.EndsAt,
			&it.ArchivedAt, &it.ImageURL, &it.AttrMs, &it.AttrSeq, &it.StMs, &it.StSeq)
	if errors.Is(err, pgx.ErrNoRows) {
		return it, false, nil
	}
	if err != nil {
		return it, false, fmt.Errorf("record: item %s: %w", id, err)
	}
	rows, _ := q.db.Query(ctx, `SELECT id, user_id, status, quantity, price_cents, created_at, updated_at, expires_at,
		pruned_at IS NOT NULL, restocked FROM orders WHERE item_id = $1`, id)
	it.Orders, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (OrderRecord, error) {
		var o OrderRecord
		err := row.Scan(&o.ID, &o.User, &o.Status, &o.Qty, &o.Price, &o.Created, &o.Updated, &o.Expires, &o.Pruned, &o.Restocked)
		return o, err
	})
	if err != nil {
		return it, false, fmt.Errorf("record: orders of %s: %w", id, err)
	}
	if err := q.orderPayments(ctx, id, it.Orders); err != nil {
		return it, false, err
	}
	return it, true, nil
}

// orderPayments sets the Payment of each of item's orders that has one: the payment that
// succeeded for it, else a refunded one, else its attempt opened last.
func (q *Queries) orderPayments(ctx context.Context, item string, orders []OrderRecord) error {
	rows, _ := q.db.Query(ctx, `SELECT DISTINCT ON (p.order_id) p.order_id, p.id, p.status,
		coalesce(p.payment_intent, ''), coalesce(p.attempt, ''), p.disputed_at IS NOT NULL
		FROM payments p JOIN orders o ON o.id = p.order_id
		WHERE o.item_id = $1
		ORDER BY p.order_id, CASE p.status WHEN 'succeeded' THEN 0 WHEN 'refunded' THEN 1 ELSE 2 END,
			p.updated_at DESC, p.id`, item)
	links := map[string]*PaymentLink{}
	var oid string
	var l PaymentLink
	_, err := pgx.ForEachRow(rows, []any{&oid, &l.ID, &l.Status, &l.PaymentIntent, &l.Attempt, &l.Disputed}, func() error {
		link := l
		links[oid] = &link
		return nil
	})
	if err != nil {
		return fmt.Errorf("record: payments of %s: %w", item, err)
	}
	for i := range orders {
		orders[i].Payment = links[orders[i].ID]
	}
	return nil
}

// RatingRecord is one user's stars for an item.
type RatingRecord struct {
	User  string
	Stars int
}

// Ratings returns an item's ratings in the order they were set.
func (q *Queries) Ratings(ctx context.Context, item string) ([]RatingRecord, error) {
	rows, _ := q.db.Query(ctx, `SELECT user_id, stars FROM ratings WHERE item_id = $1 ORDER BY pos_ms, pos_seq`, item)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RatingRecord, error) {
		var x RatingRecord
		err := row.Scan(&x.User, &x.Stars)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("record: ratings of %s: %w", item, err)
	}
	return out, nil
}

// LatestRun is the newest finished reconciliation run as stored.
type LatestRun struct {
	ID           int64           `json:"id"`
	StartedAt    time.Time       `json:"started_at"`
	FinishedAt   time.Time       `json:"finished_at"`
	Status       string          `json:"status"` // ok | drift | failed | abandoned (RunAbandoned)
	FencingToken int64           `json:"fencing_token"`
	Report       json.RawMessage `json:"report"`
	Error        string          `json:"error,omitempty"`
}

// Latest returns the newest finished run (by fencing number: a stale runner's late result
// never hides a newer one), or nil when none has finished yet. A run in progress is not one;
// an abandoned run is (its report null, its error saying which run superseded it, finished_at
// when that run closed it), so a crash never leaves an older run's report looking current.
func (q *Queries) Latest(ctx context.Context) (*LatestRun, error) {
	var l LatestRun
	var fenceN *int64
	var errText *string
	var drift []byte
	err := q.db.QueryRow(ctx, `SELECT id, started_at, finished_at, status, fencing_token, drift, error
		FROM reconciliation_runs WHERE finished_at IS NOT NULL
		ORDER BY fencing_token DESC NULLS LAST, id DESC LIMIT 1`).
		Scan(&l.ID, &l.StartedAt, &l.FinishedAt, &l.Status, &fenceN, &drift, &errText)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("record: latest run: %w", err)
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
func (q *Queries) LatestReport(ctx context.Context) (any, error) {
	l, err := q.Latest(ctx)
	if err != nil || l == nil {
		return nil, err
	}
	return l, nil
}
