package reconcile

import (
	"context"

	"github.com/flashsale/flashsale/internal/record"
)

// PaymentRecord is the record's payments check (*record.Queries has it).
type PaymentRecord interface {
	PaymentIssues(ctx context.Context) ([]record.PaymentIssue, int, error)
}

// PaymentProvider answers a payment's current status at the provider (payment.Provider's
// GetPayment, reduced to what reconciliation needs).
type PaymentProvider interface {
	PaymentStatus(ctx context.Context, id string) (string, error)
}

// PaymentDrift is a payment the record does not account for exactly once (see
// record.PaymentIssue), with the provider's word on it when one was asked.
type PaymentDrift struct {
	PaymentID   string `json:"payment_id,omitempty"`
	OrderID     string `json:"order_id"`
	Status      string `json:"status"`       // the payment's in the record
	OrderStatus string `json:"order_status"` // the order's in the record ("" = none)
	Payments    int    `json:"payments,omitempty"`
	Provider    string `json:"provider_status,omitempty"` // the provider's status, or "unknown: <error>"
}

// PaymentCheck is what the batch found about payments.
type PaymentCheck struct {
	Checked int            `json:"checked"`
	Drift   []PaymentDrift `json:"drift"`
}

// checkPayments checks every recorded payment against the recorded orders, asking the
// provider (when configured) for the state of each one that does not add up.
func (r *Reconciler) checkPayments(ctx context.Context) (*PaymentCheck, error) {
	pr, ok := r.db.(PaymentRecord)
	if !ok {
		return nil, nil
	}
	issues, checked, err := pr.PaymentIssues(ctx)
	if err != nil {
		return nil, err
	}
	out := &PaymentCheck{Checked: checked, Drift: []PaymentDrift{}}
	for _, p := range issues {
		d := PaymentDrift{PaymentID: p.PaymentID, OrderID: p.OrderID, Status: p.Status, OrderStatus: p.OrderStatus, Payments: p.Payments}
		if r.opt.Payments != nil && p.PaymentID != "" {
			if s, err := r.opt.Payments.PaymentStatus(ctx, p.PaymentID); err != nil {
				d.Provider = "unknown: " + err.Error()
			} else {
				d.Provider = s
			}
		}
		out.Drift = append(out.Drift, d)
	}
	return out, nil
}
