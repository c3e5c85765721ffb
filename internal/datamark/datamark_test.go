package datamark_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/datamark"
	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/redisconn"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// ledger is the record of a throw-away database.
func ledger(t *testing.T) *record.Queries {
	t.Helper()
	q, err := record.OpenQueries(testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	return q
}

func wantLoss(t *testing.T, what string, err error, reason string) {
	t.Helper()
	var l *datamark.Loss
	if !errors.As(err, &l) || l.Reason != reason || !errors.Is(err, datamark.ErrLost) {
		t.Fatalf("%s: got %v, want a loss (%s)", what, err, reason)
	}
	if !strings.HasPrefix(err.Error(), "redis_data_lost: ") {
		t.Fatalf("%s: %q does not start with the reason token", what, err)
	}
}

func check(t *testing.T, w *datamark.Watch) {
	t.Helper()
	if err := w.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A shop that was never used is no loss; a Redis that comes back empty is, for the api that
// saw its markers, for an api started afterwards and for the reconciler, until a restore.
func TestEmptyRedisIsNoticedUntilRestored(t *testing.T) {
	ctx := context.Background()
	rdb, keys, _ := testenv.PrivateRedis(t)
	k := datamark.NewKeeper(rdb, keys, ledger(t))
	w := datamark.NewWatch(rdb, keys)

	check(t, w) // no markers yet: an api alone never calls that a loss
	if err := w.Lost(); err != nil {
		t.Fatalf("a new shop: %v", err)
	}
	if err := k.Check(ctx); err != nil { // adopts: a shop never used
		t.Fatalf("a new shop, the reconciler: %v", err)
	}
	for range 3 {
		check(t, w)
		if err := k.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Lost(); err != nil {
		t.Fatalf("nothing lost: %v", err)
	}

	if err := rdb.FlushAll(ctx).Err(); err != nil { // the private server only
		t.Fatal(err)
	}
	if err := exactlyonce.Load(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	check(t, w)
	wantLoss(t, "the api that saw the markers", w.Lost(), "gone")
	later := datamark.NewWatch(rdb, keys) // an api started after the loss
	check(t, later)
	wantLoss(t, "an api started afterwards", later.Lost(), "gone")
	wantLoss(t, "the reconciler", k.Check(ctx), "gone")
	check(t, w) // still lost: nothing but a restore ends it
	wantLoss(t, "the api, again", w.Lost(), "gone")

	if err := k.Restored(ctx); err != nil {
		t.Fatal(err)
	}
	check(t, w)
	check(t, later)
	if err := errors.Join(w.Lost(), later.Lost(), k.Check(ctx)); err != nil {
		t.Fatalf("after the restore: %v", err)
	}
}

// Every api restarted after the loss (none remembers a marker): the reconciler still knows
// from the record, and says so to every api through the marker.
func TestRecordNoticesWhenNoApiRemembers(t *testing.T) {
	ctx := context.Background()
	rdb, keys, _ := testenv.PrivateRedis(t)
	k := datamark.NewKeeper(rdb, keys, ledger(t))
	if err := k.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	w := datamark.NewWatch(rdb, keys)
	check(t, w)
	if err := w.Lost(); err != nil {
		t.Fatalf("an api that never saw a marker cannot tell: %v", err)
	}
	wantLoss(t, "the reconciler", k.Check(ctx), "gone")
	check(t, w)
	wantLoss(t, "the api, told through the marker", w.Lost(), "gone")
}

// Redis restarted from an older copy of its data (an old RDB file): the markers moved back.
func TestOlderCopyIsNoticed(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "--appendonly", "no", "--save", "")
	rdb, err := redisconn.Open(ctx, []string{srv.Addr}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	keys := keyspace.Space{Prefix: "t" + testenv.Token(4) + ":"}
	k := datamark.NewKeeper(rdb, keys, ledger(t))
	w := datamark.NewWatch(rdb, keys)
	if err := k.Check(ctx); err != nil {
		t.Fatal(err)
	}
	check(t, w)
	if err := rdb.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(filepath.Join(srv.Dir, "dump.rdb"))
	if err != nil {
		t.Fatal(err)
	}
	check(t, w) // the data moves on after the copy was taken
	if err := k.Check(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := os.WriteFile(filepath.Join(srv.Dir, "dump.rdb"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if err := exactlyonce.Load(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	fresh := datamark.NewWatch(rdb, keys) // before the others: it remembers nothing
	check(t, fresh)
	if err := fresh.Lost(); err != nil {
		t.Fatalf("an api that never saw a marker cannot tell: %v", err)
	}
	check(t, w)
	wantLoss(t, "the api", w.Lost(), "behind")
	wantLoss(t, "the reconciler", k.Check(ctx), "behind")
	check(t, fresh)
	wantLoss(t, "an api started afterwards", fresh.Lost(), "behind")
}

// On a Redis Cluster each marker lives in its shard's slot: a master that loses its data
// loses the markers of the shards it holds, and the loss names one of them.
func TestClusterNodeLossIsNoticed(t *testing.T) {
	ctx := context.Background()
	rdb, keys := testenv.Cluster(t)
	k := datamark.NewKeeper(rdb, keys, ledger(t))
	w := datamark.NewWatch(rdb, keys)
	if err := k.Check(ctx); err != nil {
		t.Fatal(err)
	}
	check(t, w)
	cc := rdb.(*redis.ClusterClient)
	victim, err := cc.MasterForKey(ctx, keys.Shard(5).Marker())
	if err != nil {
		t.Fatal(err)
	}
	if err := victim.FlushAll(ctx).Err(); err != nil { // one master of the private cluster
		t.Fatal(err)
	}
	check(t, w)
	wantLoss(t, "the api", w.Lost(), "gone")
	wantLoss(t, "the reconciler", k.Check(ctx), "gone")
	var l *datamark.Loss
	errors.As(w.Lost(), &l)
	owner, err := cc.MasterForKey(ctx, keys.Shard(slotIndex(l.Slot)).Marker())
	if err != nil {
		t.Fatal(err)
	}
	if owner.Options().Addr != victim.Options().Addr {
		t.Fatalf("the loss names %s, on %s, not on the flushed master %s", l.Slot, owner.Options().Addr, victim.Options().Addr)
	}
	if err := k.Restored(ctx); err != nil {
		t.Fatal(err)
	}
	check(t, w)
	if err := errors.Join(w.Lost(), k.Check(ctx)); err != nil {
		t.Fatalf("after the restore: %v", err)
	}
}

// slotIndex is n of "shard n".
func slotIndex(name string) int {
	n := 0
	for _, c := range strings.TrimPrefix(name, "shard ") {
		n = n*10 + int(c-'0')
	}
	return n
}
