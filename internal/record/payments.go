package record

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PaymentIssue is a payment the record does not account for exactly once: a succeeded payment
// whose order is not paid, a refunded one whose order is not expired, cancelled or refunded (or
// whose refund is not the whole amount), or an order that two succeeded payments paid.
type PaymentIssue struct {
	PaymentID   string // "" for an order paid twice (OrderID names it; Payments counts them)
	OrderID     string
	Status      string // the payment's: succeeded | refunded
	OrderStatus string // the order's in the record; "" when the record has no such order
	Payments    int    // succeeded payments of the order (an order paid twice)
}

// PaymentIssues checks the payments table against orders: every succeeded payment is one paid
// order, every refunded one the whole amount given back for an order that ended unpaid, and no
// order has two succeeded payments. It also returns how many payments it checked.
func (q *Queries) PaymentIssues(ctx context.Context) ([]PaymentIssue, int, error) {
	var checked int
	if err := q.db.QueryRow(ctx, `SELECT count(*) FROM payments`).Scan(&checked); err != nil {
		return nil, 0, fmt.Errorf("record: payments: %w", err)
	}
	rows, err := q.db.Query(ctx, `
	SELECT p.id, p.order_id, p.status, COALESCE(o.status, ''), 1
	FROM payments p LEFT JOIN orders o ON o.id = p.order_id
	WHERE (p.status = 'succeeded' AND o.status IS DISTINCT FROM 'paid')
	   OR (p.status = 'refunded' AND (o.status IS NULL OR o.status NOT IN ('expired', 'cancelled', 'refunded') OR p.refunded_cents <> p.amount_cents))
	UNION ALL
	SELECT '', order_id, 'succeeded', '', count(*)::int FROM payments WHERE status = 'succeeded'
	GROUP BY order_id HAVING count(*) > 1
	ORDER BY 2, 1`)
	if err != nil {
		return nil, 0, fmt.Errorf("record: payments: %w", err)
	}
	defer rows.Close()
	var out []PaymentIssue
	for rows.Next() {
		var p PaymentIssue
		if err := rows.Scan(&p.PaymentID, &p.OrderID, &p.Status, &p.OrderStatus, &p.Payments); err != nil {
			return nil, 0, fmt.Errorf("record: payments: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("record: payments: %w", err)
	}
	return out, checked, nil
}

// RecordedPayment is a payments row.
type RecordedPayment struct {
	ID, OrderID, Status        string
	PaymentIntent, Attempt     string // "" when not recorded
	AmountCents, RefundedCents int64
}

// paymentCols are the columns a RecordedPayment is scanned from (scanPayment).
const paymentCols = `id, order_id, status, coalesce(payment_intent, ''), coalesce(attempt, ''), amount_cents, refunded_cents`

func scanPayment(row pgx.Row, p *RecordedPayment) error {
	return row.Scan(&p.ID, &p.OrderID, &p.Status, &p.PaymentIntent, &p.Attempt, &p.AmountCents, &p.RefundedCents)
}

// RecordedAttempts returns, of the checkout attempts given (metadata flashsale_attempt), those
// the record holds, with the order each was made for: a payment is this shop's only if its
// attempt is one of them.
func (q *Queries) RecordedAttempts(ctx context.Context, attempts []string) (map[string]string, error) {
	out := make(map[string]string, len(attempts))
	rows, _ := q.db.Query(ctx, `SELECT attempt, order_id FROM payments WHERE attempt = ANY($1::text[])`, attempts)
	var att, oid string
	if _, err := pgx.ForEachRow(rows, []any{&att, &oid}, func() error { out[att] = oid; return nil }); err != nil {
		return nil, fmt.Errorf("record: recorded attempts: %w", err)
	}
	return out, nil
}

// OrderMoney is an order as the money check reads it: its status, what it costs, and the
// payments recorded for it.
type OrderMoney struct {
	Status      string
	AmountCents int64
	Payments    []RecordedPayment
}

// OrdersMoney returns the recorded orders among ids (absent ones are left out) with their
// payments. Two index lookups, not a join: a join of a few hundred orders with the whole
// payments table is what the planner picks for tables it has no statistics on yet.
func (q *Queries) OrdersMoney(ctx context.Context, ids []string) (map[string]OrderMoney, error) {
	out := make(map[string]OrderMoney, len(ids))
	rows, err := q.db.Query(ctx, `SELECT id, status, quantity * price_cents FROM orders WHERE id = ANY($1::text[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("record: orders' payments: %w", err)
	}
	for rows.Next() {
		var id string
		var o OrderMoney
		if err := rows.Scan(&id, &o.Status, &o.AmountCents); err != nil {
			rows.Close()
			return nil, fmt.Errorf("record: orders' payments: %w", err)
		}
		out[id] = o
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("record: orders' payments: %w", err)
	}
	rows, err = q.db.Query(ctx, `SELECT `+paymentCols+` FROM payments WHERE order_id = ANY($1::text[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("record: orders' payments: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var p RecordedPayment
		if err := scanPayment(rows, &p); err != nil {
			return nil, fmt.Errorf("record: orders' payments: %w", err)
		}
		if o, ok := out[p.OrderID]; ok {
			o.Payments = append(o.Payments, p)
			out[p.OrderID] = o
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("record: orders' payments: %w", err)
	}
	return out, nil
}

// SucceededPayments returns the payments recorded succeeded (they paid their order) whose
// first event came in [from, to).
func (q *Queries) SucceededPayments(ctx context.Context, from, to time.Time) ([]RecordedPayment, error) {
	rows, err := q.db.Query(ctx, `
	SELECT `+paymentCols+` FROM payments
	WHERE status = 'succeeded' AND created_at >= $1 AND created_at < $2 ORDER BY id`, from, to)
	if err != nil {
		return nil, fmt.Errorf("record: succeeded payments: %w", err)
	}
	defer rows.Close()
	var out []RecordedPayment
	for rows.Next() {
		var p RecordedPayment
		if err := scanPayment(rows, &p); err != nil {
			return nil, fmt.Errorf("record: succeeded payments: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("record: succeeded payments: %w", err)
	}
	return out, nil
}

// Dispute is a paid order's payment whose charge was disputed, for the admin page.
type Dispute struct {
	OrderID       string    `json:"order_id"`
	PaymentID     string    `json:"payment_id"`
	PaymentIntent *string   `json:"payment_intent"`
	OrderStatus   *string   `json:"order_status"` // null when the record has no such order
	AmountCents   int64     `json:"amount_cents"`
	RefundedCents int64     `json:"refunded_cents"`
	DisputedAt    time.Time `json:"disputed_at"`
}

// Disputes returns the newest n disputed payments, newest first.
func (q *Queries) Disputes(ctx context.Context, n int) ([]Dispute, error) {
	rows, err := q.db.Query(ctx, `
	SELECT p.order_id, p.id, p.payment_intent, o.status, p.amount_cents, p.refunded_cents, p.disputed_at
	FROM payments p LEFT JOIN orders o ON o.id = p.order_id
	WHERE p.disputed_at IS NOT NULL ORDER BY p.disputed_at DESC, p.id LIMIT $1`, n)
	if err != nil {
		return nil, fmt.Errorf("record: disputes: %w", err)
	}
	defer rows.Close()
	out := []Dispute{}
	for rows.Next() {
		var d Dispute
		if err := rows.Scan(&d.OrderID, &d.PaymentID, &d.PaymentIntent, &d.OrderStatus, &d.AmountCents, &d.RefundedCents, &d.DisputedAt); err != nil {
			return nil, fmt.Errorf("record: disputes: %w", err)
		}
		d.DisputedAt = d.DisputedAt.UTC()
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("record: disputes: %w", err)
	}
	return out, nil
}
