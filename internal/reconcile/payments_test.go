package reconcile_test

import (
	"context"
	"errors"
	"testing"

	"github.com/flashsale/flashsale/internal/reconcile"
)

// statusOf is a provider that knows one payment.
type statusOf map[string]string

func (s statusOf) PaymentStatus(_ context.Context, id string) (string, error) {
	if st, ok := s[id]; ok {
		return st, nil
	}
	return "", errors.New("no such payment")
}

// TestPaymentDrift: a batch checks every recorded payment against its order; a succeeded
// payment whose order is not paid makes the run unclean, with the provider's word on it.
func TestPaymentDrift(t *testing.T) {
	e := newEnv(t)
	e.item("P", 10, 5)
	o := e.buy("P", "pa", 1)
	e.drain()
	r := e.reconciler(reconcile.Options{Payments: statusOf{"pi_lost": "succeeded"}})
	rep, err := r.Batch(e.ctx, reconcile.BatchOptions{})
	if err != nil || !rep.Clean() || rep.Payments == nil || rep.Payments.Checked != 0 {
		t.Fatalf("before: %+v %v", rep, err)
	}
	// A success the record holds for an order that is only reserved: no event stream writes
	// that; the check must say so.
	e.exec(`INSERT INTO payments (id, order_id, provider, amount_cents, status, created_at, updated_at)
		VALUES ('pi_lost', $1, 'sim', 1250, 'succeeded', now(), now())`, o.ID)
	rep, err = r.Batch(e.ctx, reconcile.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Clean() || !rep.DriftRemains() || rep.Payments.Checked != 1 || len(rep.Payments.Drift) != 1 {
		t.Fatalf("after: %+v", rep.Payments)
	}
	d := rep.Payments.Drift[0]
	if d.PaymentID != "pi_lost" || d.OrderID != o.ID || d.Status != "succeeded" || d.OrderStatus != "reserved" || d.Provider != "succeeded" {
		t.Fatalf("drift %+v", d)
	}
}
