package reconcile_test

import (
	"slices"
	"testing"

	"github.com/flashsale/flashsale/internal/reconcile"
)

// An order whose price differs between Redis and the record is drift, named as such; repair
// cannot fix it (the record keeps the first event's price) and says so.
func TestOrderPriceDrift(t *testing.T) {
	e := newEnv(t)
	e.item("A", 100, 10)
	o := e.buy("A", "alice", 2)
	e.buy("A", "bob", 1)
	e.drain()
	e.exec(`UPDATE orders SET price_cents = price_cents + 1 WHERE id = $1`, o.ID)

	rep, err := e.reconciler(reconcile.Options{}).Batch(e.ctx, reconcile.BatchOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"order_price A " + o.ID + " price_cents"}
	if got := driftKeys(rep.Drift); !slices.Equal(got, want) {
		t.Fatalf("drift\n got %q\nwant %q", got, want)
	}
	if d := rep.Drift[0]; d.Redis != "250" || d.Postgres != "251" {
		t.Fatalf("values %+v", d)
	}
	if rep.Repair == nil || len(rep.Repair.NotFixed) != 1 || rep.Repair.Reemitted != 0 || !rep.DriftRemains() {
		t.Fatalf("repair %+v", rep.Repair)
	}
}
