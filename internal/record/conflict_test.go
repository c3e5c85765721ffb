package record_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/record"
)

// TestApplyParksAReusedOrderID: a promoted primary that lost an order may reuse its id. The
// record never merges the two: an event whose order id names an order with other content is
// parked in dead_letters as a conflict (both write paths, within one batch too), and the
// stored order is left as it was.
func TestApplyParksAReusedOrderID(t *testing.T) {
	db := openDB(t)
	w := record.NewWriter(db)
	ctx := context.Background()
	order := func(typ string, ms int64, id, user string) events.Event {
		return ev(typ, ms, func(e *events.Event) {
			e.OrderID, e.UserID = id, user
			if typ == events.OrderReserved {
				exp := e.At.Add(10 * time.Minute)
				e.ExpiresAt = &exp
			}
		})
	}
	apply := func(want record.Result, evs ...events.Event) {
		t.Helper()
		res, err := w.Apply(ctx, msgs(t, evs...))
		if err != nil {
			t.Fatal(err)
		}
		if res != want {
			t.Fatalf("apply %d events: %+v, want %+v", len(evs), res, want)
		}
	}
	var offset int64
	apply(record.Result{Applied: 1}, order(events.OrderReserved, 1, "a.1", "u"))
	// msgs numbers offsets from 0 in every batch: give every batch its own partition offsets
	// so dead letters (one per offset) are told apart.
	applyAt := func(want record.Result, evs ...events.Event) {
		t.Helper()
		m := msgs(t, evs...)
		for i := range m {
			offset++
			m[i].Offset = offset
		}
		res, err := w.Apply(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if res != want {
			t.Fatalf("apply %d events: %+v, want %+v", len(evs), res, want)
		}
	}
	// Another shopper's order under a.1 (the merge path: the order exists), and its payment.
	applyAt(record.Result{Invalid: 2, Conflicts: 2}, order(events.OrderReserved, 100, "a.1", "v"), order(events.OrderPaid, 101, "a.1", "v"))
	// The same shopper again (a retry re-made after the failover), at another creation time.
	applyAt(record.Result{Invalid: 1, Conflicts: 1}, order(events.OrderReserved, 200, "a.1", "u"))
	// A payment alone of the other shopper (the fast path: caught by the merge's guard).
	applyAt(record.Result{Invalid: 1, Conflicts: 1}, order(events.OrderPaid, 300, "a.1", "v"))
	// Two orders under a.2 within one batch: the first is recorded, the second parked.
	applyAt(record.Result{Applied: 1, Invalid: 1, Conflicts: 1}, order(events.OrderReserved, 400, "a.2", "u"), order(events.OrderReserved, 401, "a.2", "w"))
	// The real order's own payment is applied.
	applyAt(record.Result{Applied: 1}, order(events.OrderPaid, 500, "a.1", "u"))

	var o1, o2 record.Order
	db.First(&o1, "id = ?", "a.1")
	db.First(&o2, "id = ?", "a.2")
	if o1.UserID != "u" || o1.Status != "paid" || !o1.CreatedAt.Equal(t0.Add(time.Millisecond)) || o2.UserID != "u" || o2.Status != "reserved" {
		t.Fatalf("stored orders: %+v, %+v", o1, o2)
	}
	var dead []record.DeadLetter
	db.Order("kafka_offset").Find(&dead)
	if len(dead) != 5 {
		t.Fatalf("dead letters %d, want 5", len(dead))
	}
	for _, d := range dead {
		if !strings.HasPrefix(d.Error, "conflict: order a.") {
			t.Fatalf("dead letter %d: %q", d.KafkaOffset, d.Error)
		}
	}
	var moves int64
	db.Model(&record.StockMovement{}).Count(&moves)
	if moves != 2 {
		t.Fatalf("stock movements %d, want 2 (a.1's and a.2's reservations only)", moves)
	}
}
