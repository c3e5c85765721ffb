package reconcile_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

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

// An order that changes between the batch's confirmation and its repair is not re-emitted:
// its own event carries the change to the record, and a re-emission beside it would record
// the change twice (two stock returns of one cancelled order).
func TestRepairSkipsOrderChangedSinceConfirmed(t *testing.T) {
	e := newEnv(t)
	e.item("A", 100, 10)
	o := e.buy("A", "alice", 2)
	e.drain()
	// The order's event never reached the record.
	e.exec(`DELETE FROM stock_movements WHERE order_id = $1`, o.ID)
	e.exec(`DELETE FROM orders WHERE id = $1`, o.ID)

	opt := reconcile.Options{}
	reconcile.SetBeforeRepair(&opt, func(context.Context) {
		if _, err := e.ord.Cancel(e.ctx, "alice", o.ID); err != nil {
			t.Error(err)
		}
	})
	rep, err := e.reconciler(opt).Batch(e.ctx, reconcile.BatchOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := driftKeys(rep.Drift); !slices.Equal(got, []string{"order_missing_in_postgres A " + o.ID + " "}) {
		t.Fatalf("drift %q", got)
	}
	e.drain()
	var status string
	if err := e.db.QueryRow(e.ctx, `SELECT status FROM orders WHERE id = $1`, o.ID).Scan(&status); err != nil || status != "cancelled" {
		t.Fatalf("order in the record: %q %v", status, err)
	}
	var returns, sum int64
	if err := e.db.QueryRow(e.ctx, `SELECT count(*) FILTER (WHERE kind = 'returned'), coalesce(sum(delta), 0)
		FROM stock_movements WHERE order_id = $1`, o.ID).Scan(&returns, &sum); err != nil {
		t.Fatal(err)
	}
	if returns != 1 {
		t.Fatalf("the record holds %d stock returns of one cancelled order (net %+d units)", returns, sum)
	}
}

// A runner that stalls between confirming its drift and repairing it, past its lock's TTL,
// while a newer runner repairs the same drift, re-emits nothing when it wakes: its fencing
// number is older, so the record does not get the order's events twice.
func TestStalledRepairFenced(t *testing.T) {
	e := newEnv(t)
	e.item("A", 100, 10)
	o := e.buy("A", "alice", 2)
	e.drain()
	e.exec(`DELETE FROM stock_movements WHERE order_id = $1`, o.ID)
	e.exec(`DELETE FROM orders WHERE id = $1`, o.ID)

	stalled := make(chan struct{})
	release := make(chan struct{})
	// A TTL far beyond the test: the stalled runner's refresh loop never runs meanwhile (a
	// stop-the-world pause stops it too), so only the fencing number can stop its writes.
	opt := reconcile.Options{LockTTL: time.Hour}
	reconcile.SetBeforeRepair(&opt, func(context.Context) {
		close(stalled)
		<-release
	})
	var staleErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, staleErr = e.reconciler(opt).Batch(e.ctx, reconcile.BatchOptions{Repair: true})
	}()
	waitStarted(t, stalled, done, &staleErr)
	key, _ := e.keys.Lock(reconcile.LockName)
	e.rdb.Del(e.ctx, key) // the lock expired during the stall

	fresh, err := e.reconciler(reconcile.Options{}).Batch(e.ctx, reconcile.BatchOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Repair == nil || len(fresh.Repair.Fixed) != 1 {
		t.Fatalf("fresh repair %+v", fresh.Repair)
	}
	close(release)
	<-done
	if !errors.Is(staleErr, reconcile.ErrFenced) {
		t.Fatalf("stale runner: %v; want ErrFenced", staleErr)
	}
	e.drain()
	var reserved int
	if err := e.db.QueryRow(e.ctx, `SELECT count(*) FROM stock_movements WHERE order_id = $1 AND kind = 'reserved'`, o.ID).Scan(&reserved); err != nil {
		t.Fatal(err)
	}
	if reserved != 1 {
		t.Fatalf("the record holds %d reservations of one order", reserved)
	}
}

// An item whose attributes differ between Redis and the record (its price, say) is drift;
// repair re-emits the item and the next run finds nothing.
func TestItemAttributeDrift(t *testing.T) {
	e := newEnv(t)
	e.item("A", 100, 10)
	e.item("B", 100, 10)
	e.drain()
	e.exec(`UPDATE items SET price_cents = 999, name = 'stale' WHERE id = 'A'`)
	e.exec(`UPDATE items SET per_user_limit = 3, starts_at = now() WHERE id = 'B'`)

	rec := e.reconciler(reconcile.Options{})
	rep, err := rec.Batch(e.ctx, reconcile.BatchOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"item_attribute A  name",
		"item_attribute A  price_cents",
		"item_attribute B  per_user_limit",
		"item_attribute B  starts_at",
	}
	if got := driftKeys(rep.Drift); !slices.Equal(got, want) {
		t.Fatalf("drift\n got %q\nwant %q", got, want)
	}
	if rep.Repair == nil || len(rep.Repair.Fixed) != len(want) || rep.DriftRemains() {
		t.Fatalf("repair %+v", rep.Repair)
	}
	again, err := rec.Batch(e.ctx, reconcile.BatchOptions{})
	if err != nil || !again.Clean() {
		t.Fatalf("after repair: %v drift %q", err, driftKeys(again.Drift))
	}
}
