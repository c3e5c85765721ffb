package reconcile_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/reconcile"
)

// What a failover to a primary that lost writes leaves, when order numbers go on from its copy,
// is reported by kind: an order the record holds that Redis lacks, an id naming two different
// orders, an event parked because its id named another order. Nothing is repaired, each says
// why, batch exits 3. The orders are made by hand; the conflict goes through the relay.
func TestBatchReportsFailoverDriftByKind(t *testing.T) {
	e := newEnv(t)
	e.item("A", 100, 10)
	lost := e.buy("A", "alice", 1)
	reused := e.buy("A", "bob", 2)
	kept := e.buy("A", "carol", 1)
	e.drain()

	k := e.keys.Item("A")
	// The primary of record never had `lost`: neither the order nor its unit.
	e.rdb.HDel(e.ctx, k.Orders(), lost.ID)
	e.rdb.HIncrBy(e.ctx, k.Hash(), "stock_left", 1)
	e.rdb.HIncrBy(e.ctx, k.Hash(), "reserved", -1)
	// It made another order (dave's, a second later) under `reused`'s id.
	packed := strings.Split(e.rdb.HGet(e.ctx, k.Orders(), reused.ID).Val(), "|") // user|qty|price|status|created|expires
	created, _ := strconv.ParseInt(packed[4], 10, 64)
	packed[0], packed[4] = "dave", strconv.FormatInt(created+1000, 10)
	e.rdb.HSet(e.ctx, k.Orders(), reused.ID, strings.Join(packed, "|"))
	// And published an order of erin's under `kept`'s id, which the record parks.
	if err := e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: k.Outbox(), Values: []any{"type", "order.reserved", "at", created + 2000,
		"item", "A", "order", kept.ID, "user", "erin", "quantity", 1, "price_cents", 250, "expires", created + 3_600_000}}).Err(); err != nil {
		t.Fatal(err)
	}
	e.drain()

	rep, err := e.reconciler(reconcile.Options{}).Batch(e.ctx, reconcile.BatchOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"order_conflict_parked A " + kept.ID + " ",
		"order_id_reused A " + reused.ID + " ",
		"order_missing_in_redis A " + lost.ID + " ",
	}
	got := driftKeys(rep.Drift)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("drift\n got %q\nwant %q", got, want)
	}
	for _, d := range rep.Drift {
		switch d.Kind {
		case reconcile.KindOrderIDReused:
			if !strings.HasPrefix(d.Redis, "user dave, quantity 2") || !strings.HasPrefix(d.Postgres, "user bob, quantity 2") {
				t.Fatalf("the two orders of %s: %+v", d.OrderID, d)
			}
		case reconcile.KindConflictParked:
			if !strings.HasPrefix(d.Postgres, "dead_letters ") {
				t.Fatalf("the parked conflict names no dead letter: %+v", d)
			}
		}
	}
	if rep.Repair == nil || len(rep.Repair.NotFixed) != 3 || rep.Repair.Reemitted != 0 || !rep.DriftRemains() {
		t.Fatalf("repair %+v", rep.Repair)
	}
	for _, n := range rep.Repair.NotFixed {
		if n.Reason == "" {
			t.Fatalf("no reason for %v", n.Drift)
		}
	}
	latest, _ := e.rec.Latest(e.ctx)
	if latest == nil || latest.Status != "drift" {
		t.Fatalf("latest run %+v", latest)
	}

	// Once an operator settled the parked order and deleted its letter, it is no longer reported.
	e.exec(`DELETE FROM dead_letters WHERE error LIKE 'conflict: %'`)
	rep, err = e.reconciler(reconcile.Options{}).Batch(e.ctx, reconcile.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(driftKeys(rep.Drift)); strings.Contains(got, reconcile.KindConflictParked) {
		t.Fatalf("a deleted dead letter still reported: %s", got)
	}
}
