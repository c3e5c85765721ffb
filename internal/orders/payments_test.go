package orders_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/orders"
)

// attach checks out o with payment pid (index, then attach), as the payment service does.
func (e *env) attach(o orders.Order, pid string) orders.Order {
	e.t.Helper()
	ctx := context.Background()
	if err := e.ord.IndexPayment(ctx, pid, o.ID); err != nil {
		e.t.Fatal(err)
	}
	a, err := e.ord.AttachPayment(ctx, o.UserID, o.ID, pid)
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

// TestSettlePayment: every reply of a provider's "payment succeeded", from every state of the
// order; a repeat changes nothing; the payment id, never anything else, finds the order.
func TestSettlePayment(t *testing.T) {
	e := newEnv(t, time.Hour)
	ctx := context.Background()
	e.item("sp", 20, 10)
	for _, c := range []struct {
		name   string
		before func(o orders.Order)
		want   orders.Settlement
		status orders.Status
	}{
		{"reserved", func(orders.Order) {}, orders.SettledPaid, orders.Paid},
		{"cancelled", func(o orders.Order) { must(t)(e.ord.Cancel(ctx, "alice", o.ID)) }, orders.SettledRefund, orders.Cancelled},
		{"overdue", func(o orders.Order) { e.backdate(o) }, orders.SettledRefund, orders.Expired},
		{"expired", func(o orders.Order) {
			e.backdate(o)
			if _, err := e.ord.ExpireDue(ctx, "sp", 100); err != nil {
				t.Fatal(err)
			}
		}, orders.SettledRefund, orders.Expired},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := e.buy("sp", "alice", 1)
			pid := "pi_" + c.name
			if a := e.attach(o, pid); a.PaymentID != pid {
				t.Fatalf("attached %q", a.PaymentID)
			}
			c.before(o)
			got, st, err := e.ord.SettlePayment(ctx, pid, "evt_1")
			if err != nil || st != c.want || got.Status != c.status || got.PaymentID != pid {
				t.Fatalf("settle: %v %s %+v, want %s %s", err, st, got, c.want, c.status)
			}
			if c.want == orders.SettledRefund {
				// Until the provider refunded, a repeat asks for the refund again.
				if _, st, _ := e.ord.SettlePayment(ctx, pid, "evt_2"); st != orders.SettledRefund {
					t.Fatalf("repeat before the refund: %s", st)
				}
				for i, want := range []bool{true, false} {
					if done, err := e.ord.FinishRefund(ctx, o.ID, pid); err != nil || done != want {
						t.Fatalf("finish refund #%d: %v %v", i, done, err)
					}
				}
			}
			// Any further delivery changes nothing.
			if _, st, err := e.ord.SettlePayment(ctx, pid, "evt_1"); err != nil || st != orders.SettledBefore {
				t.Fatalf("repeat: %s %v", st, err)
			}
			l := e.ledger("sp")
			if l.Orders[o.ID].Status != c.status {
				t.Fatalf("order is %s", l.Orders[o.ID].Status)
			}
			n := map[string]int{}
			for _, typ := range l.Events[o.ID] {
				n[typ]++
			}
			if c.want == orders.SettledPaid && (n["order.paid"] != 1 || n["payment.refunded"] != 0) ||
				c.want == orders.SettledRefund && (n["order.paid"] != 0 || n["payment.refunded"] != 1) {
				t.Fatalf("events %v", l.Events[o.ID])
			}
		})
	}

	// A payment no checkout attached, or another order's: nothing found, nothing changed.
	o := e.buy("sp", "bob", 1)
	e.attach(o, "pi_bob")
	if _, _, err := e.ord.SettlePayment(ctx, "pi_nobody", "evt_x"); !errors.Is(err, orders.ErrUnknownPayment) {
		t.Fatalf("unknown payment: %v", err)
	}
	other := e.buy("sp", "carol", 1)
	if err := e.ord.IndexPayment(ctx, "pi_stray", other.ID); err != nil { // indexed, never attached
		t.Fatal(err)
	}
	if _, _, err := e.ord.SettlePayment(ctx, "pi_stray", "evt_y"); !errors.Is(err, orders.ErrUnknownPayment) {
		t.Fatalf("a payment indexed to an order it is not attached to: %v", err)
	}
	// One payment per order: a second attach keeps the first.
	if a, err := e.ord.AttachPayment(ctx, "bob", o.ID, "pi_second"); err != nil || a.PaymentID != "pi_bob" {
		t.Fatalf("second attach: %+v %v", a, err)
	}
	if err := e.ord.IndexPayment(ctx, "pi_bob", other.ID); err == nil {
		t.Fatal("a payment id indexed to a second order")
	}
	if l := e.ledger("sp"); l.Orders[other.ID].Status != orders.Reserved || l.Orders[o.ID].Status != orders.Reserved {
		t.Fatal("a refused settlement changed an order")
	}
}
