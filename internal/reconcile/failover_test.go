package reconcile_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/redisconn"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// sentinelEnv is the whole pipeline on a private primary with one replica behind three
// Sentinels, reached as the reconciler reaches it (redisconn with FLASHSALE_REDIS_SENTINELS),
// with a sale of four items recorded in Postgres and held by the replica.
func sentinelEnv(t *testing.T) (*testenv.Replicated, *env) {
	t.Helper()
	r := testenv.ReplicatedRedis(t, 1)
	sentinels := r.WithSentinels(t, 3)
	ctx := context.Background()
	rdb, err := redisconn.OpenWith(ctx, redisconn.Options{Sentinels: sentinels, MasterName: r.MasterName,
		SentinelLease: config.Defaults().RedisSentinelLease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	if err := exactlyonce.Load(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, rdb, keyspace.Space{Prefix: "t" + testenv.Token(4) + ":"})
	for _, id := range []string{"A", "B", "C", "D"} {
		e.item(id, 100, 10)
		for u := range 5 {
			e.buy(id, "u"+strconv.Itoa(u), 1)
		}
	}
	e.drain()
	return r, e
}

// killPrimary kill -9s the primary once the replica holds everything it has (so the failover
// loses nothing: the run, not a loss, is under test) and returns at once.
func killPrimary(t *testing.T, r *testenv.Replicated) {
	r.WaitInSync(t, r.Primary, 1)
	r.Primary.Kill()
}

// A batch whose primary is kill -9ed while it compares (after its first item) waits for the
// Sentinels to promote the replica, compares again against it and finishes: no drift and the
// run recorded ok.
func TestBatchRidesThroughPrimaryKill(t *testing.T) {
	r, e := sentinelEnv(t)
	var killed atomic.Bool
	opt := reconcile.Options{}
	reconcile.SetAfterScan(&opt, func(context.Context, string) {
		if killed.CompareAndSwap(false, true) {
			killPrimary(t, r)
		}
	})
	rep, err := e.reconciler(opt).Batch(e.ctx, reconcile.BatchOptions{})
	if !killed.Load() {
		t.Fatal("the primary was never killed")
	}
	if err != nil {
		t.Fatalf("batch through a failover: %v", err)
	}
	// Whether the run started over depends on how soon the client follows the Sentinels: a
	// read retried by the client may already reach the promoted replica. Either way it is clean.
	if !rep.Clean() {
		t.Fatalf("report: %d restarts, drift %v, unverified %v", rep.Restarts, driftKeys(rep.Drift), rep.Unverified)
	}
	t.Logf("the batch started over %d times", rep.Restarts)
	latest, _ := e.rec.Latest(e.ctx)
	if latest == nil || latest.Status != "ok" {
		t.Fatalf("latest run %+v", latest)
	}
}

// A restore whose primary is kill -9ed between its checks and its first write rebuilds the
// item on the promoted replica from the start; a batch then finds Redis and Postgres equal.
func TestRestoreRidesThroughPrimaryKill(t *testing.T) {
	r, e := sentinelEnv(t)
	var killed atomic.Bool
	opt := reconcile.Options{QuietFor: 50 * time.Millisecond}
	reconcile.SetAfterBegin(&opt, func(context.Context, string) {
		if killed.CompareAndSwap(false, true) {
			killPrimary(t, r)
		}
	})
	res, err := e.reconciler(opt).Restore(e.ctx, reconcile.RestoreOptions{Items: []string{"B", "C"}})
	if !killed.Load() {
		t.Fatal("the primary was never killed")
	}
	if err != nil || len(res.Restored) != 2 || len(res.Refused) != 0 {
		t.Fatalf("restore through a failover: %+v, %v", res, err)
	}
	for _, it := range res.Restored {
		if it.Orders != 5 || it.StockLeft != 95 || it.Reserved != 5 {
			t.Fatalf("restored %+v", it)
		}
	}
	rep, err := e.reconciler(reconcile.Options{}).Batch(e.ctx, reconcile.BatchOptions{})
	if err != nil || !rep.Clean() {
		t.Fatalf("batch after the restore: %v, drift %v, unverified %v", err, driftKeys(rep.Drift), rep.Unverified)
	}
}
