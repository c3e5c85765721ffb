package reconcile_test

import (
	"slices"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestRestoreReplacesBatchEntries: a restore over a live item whose orders came in one purchase
// batch (one expiry entry for all, one order list per user) rebuilds the same state: the batch
// entry goes, each order still reserved gets its own entry with its own expiry, the order lists
// and item indexes come back as they were, and every user lists the same orders.
func TestRestoreReplacesBatchEntries(t *testing.T) {
	e := newEnv(t)
	e.item("A", 10, 10)
	k := e.keys.Item("A")
	batch := exactlyonce.Bare("lib/gcra.lua", "lib/changed.lua", "inventory/purchase.lua")
	users := []string{"alice", "bob", "alice", "carol"}
	keys := []string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(), k.PurchaseLimits(), k.QueueTickets(), k.UserOrders()}
	args := []any{time.Hour.Milliseconds(), 86400000, 0, 0, 0, "A"}
	for _, u := range users {
		keys = append(keys, k.Hash())
		args = append(args, u, 1, "", "")
	}
	res, err := batch.Run(e.ctx, e.rdb, keys, args...).Slice()
	if err != nil || len(res) != 4*4+1 { // four values per attempt, then the batch's own string
		t.Fatalf("batch: %v %v", res, err)
	}
	for i := range 4 {
		if res[4*i] != "C" {
			t.Fatalf("batch: %v", res)
		}
	}
	// The purchase path indexes its orders after the script; here the relay's way does it.
	if err := orders.NewIndex(e.rdb, e.keys).Changed(e.ctx, testenv.StreamEvents(t, e.rdb, k.Outbox())); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ord.Pay(e.ctx, "bob", "A.2"); err != nil {
		t.Fatal(err)
	}
	if got := e.rdb.ZRange(e.ctx, k.Expiry(), 0, -1).Val(); !slices.Equal(got, []string{"A.1-4"}) {
		t.Fatalf("expiry index %v, want the batch's one entry", got)
	}
	e.drain()
	who := []string{"alice", "bob", "carol"}
	before := e.dump("A", who)
	listed, err := e.ord.List(e.ctx, "alice")
	if err != nil || len(listed) != 2 {
		t.Fatalf("alice's orders: %v %v", listed, err)
	}

	rec := e.reconciler(reconcile.Options{QuietFor: 10 * time.Millisecond, ReservationTTL: time.Minute})
	if r, err := rec.Restore(e.ctx, reconcile.RestoreOptions{Items: []string{"A"}}); err != nil || len(r.Restored) != 1 {
		t.Fatalf("restore: %+v %v", r, err)
	}
	e.sameState("A", before, e.dump("A", who))
	got := e.rdb.ZRange(e.ctx, k.Expiry(), 0, -1).Val()
	slices.Sort(got)
	if !slices.Equal(got, []string{"A.1", "A.3", "A.4"}) {
		t.Fatalf("expiry index after the restore: %v, want one entry per reserved order", got)
	}
	if after, err := e.ord.List(e.ctx, "alice"); err != nil || !slices.Equal(after, listed) {
		t.Fatalf("alice's orders after the restore: %v %v, before %v", after, err, listed)
	}
}
