package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/queue"
)

// TestAdmissionCountsUnits: the waiting room admits by units. The units
// the live passes may buy (each up to per_user_limit, or all that is left if less) never
// exceed stock_left: with per_user_limit 3 and 3 units left one shopper is admitted, not three
// who then find nothing; with 7 left, two; with a limit above what is left, still one.
func TestAdmissionCountsUnits(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name         string
		stock, limit int64
		admitted     int64
	}{
		{"limit 3, 3 left", 3, 3, 1},
		{"limit 3, 7 left", 7, 3, 2},
		{"limit 5, 3 left", 3, 5, 1},
		{"limit 1, 3 left", 3, 1, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRoom(t)
			unitsItem(t, r, "u", c.stock, c.limit)
			for _, u := range []string{"a", "b", "c", "d"} {
				if _, err := r.q.Join(ctx, "u", u); err != nil {
					t.Fatal(err)
				}
			}
			r.admitSome("u")
			for range 5 { // more steps, the bucket refilling: nobody else
				time.Sleep(20 * time.Millisecond)
				if _, err := r.q.Admit(ctx, "u", time.Time{}); err != nil {
					t.Fatal(err)
				}
			}
			if _, popped := r.tickets("u"); popped != c.admitted {
				t.Fatalf("%d shoppers admitted, want %d", popped, c.admitted)
			}
		})
	}
}

// TestSpentStaysSpent is the other half of finding 5: the last buyer's ticket stays spent
// after the line sells out, also when the shopper polls with the token of its waiting ticket
// (the Queue-Ticket header it was given at the join), which is answered from memory.
func TestSpentStaysSpent(t *testing.T) {
	r := newRoom(t)
	ctx := context.Background()
	unitsItem(t, r, "s", 3, 3)
	a, err := r.q.Join(ctx, "s", "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.q.Join(ctx, "s", "b")
	if err != nil {
		t.Fatal(err)
	}
	r.admitSome("s")
	pass, err := r.q.Read(ctx, "s", "a")
	if err != nil || pass.State != queue.StateAdmitted {
		t.Fatalf("a: %+v %v", pass, err)
	}
	id, err := r.q.CheckPass(pass.Pass, "s", "a", false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.inv.Purchase(ctx, inventory.PurchaseRequest{ItemID: "s", UserID: "a", Quantity: 3, QueuePass: id})
	if err != nil {
		t.Fatalf("a buys the last 3: %v", err)
	}
	if _, err := orders.NewStore(r.rdb, r.keys).Pay(ctx, "a", res.Order.ID); err != nil {
		t.Fatal(err)
	}
	// Nothing left and nothing reserved: the line is sold out (this instance's view says so).
	if st, err := r.q.Admit(ctx, "s", time.Time{}); err != nil || st.Status != "sold_out" {
		t.Fatalf("after the last units were paid: %+v %v", st, err)
	}
	for _, tok := range []string{a.Token, pass.Token, ""} {
		if tk, err := r.q.Poll(ctx, "s", "a", tok); err != nil || tk.State != queue.StateSpent {
			t.Errorf("a polls with token %.12q...: %+v %v, want spent", tok, tk, err)
		}
	}
	if tk, err := r.q.Poll(ctx, "s", "b", b.Token); err != nil || tk.State != queue.StateSoldOut {
		t.Errorf("b: %+v %v, want sold_out", tk, err)
	}
}

// unitsItem creates an item with a waiting room that admits at once (1000 a second).
func unitsItem(t *testing.T, r *room, id string, stock, limit int64) {
	t.Helper()
	in := inventory.Input{ID: id, Name: "Item " + id, PriceCents: 100, PerUserLimit: limit, Stock: &stock,
		Queue: &inventory.QueueSettings{AdmitPerSecond: 1000, MaxActive: 10, PassTTLSeconds: 600}}
	if _, _, err := r.inv.Upsert(context.Background(), in); err != nil {
		t.Fatal(err)
	}
}
