package record

import (
	"context"
	"fmt"
)

// PaymentIssue is a payment the record does not account for exactly once: a succeeded payment
// whose order is not paid, a refunded one whose order is not expired or cancelled (or whose
// refund is not the whole amount), or an order that two succeeded payments paid.
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
	   OR (p.status = 'refunded' AND (o.status IS NULL OR o.status NOT IN ('expired', 'cancelled') OR p.refunded_cents <> p.amount_cents))
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
