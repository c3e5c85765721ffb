package redisconn_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/redisconn"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// Behind Sentinels with acknowledgement auto, a change waits for every promotable replica: a
// stalled one makes changes fail, then be refused up front until the Sentinels list it down,
// and is waited for again once back. With two of three Sentinels stalled, changes are refused
// once the lease runs out; a lease not shorter than down-after is an invalid setting.
func TestAcknowledgedByEveryPromotableReplica(t *testing.T) {
	r := testenv.ReplicatedRedis(t, 2, "--repl-timeout", "2", "--repl-ping-replica-period", "1")
	sentinels := r.WithSentinels(t, 3)
	ctx := context.Background()
	if _, err := redisconn.OpenWith(ctx, redisconn.Options{Sentinels: sentinels, MasterName: r.MasterName,
		AckReplicas: redisconn.AckAuto, AckTimeout: time.Second, SentinelLease: 3 * time.Second}); !errors.Is(err, redisconn.ErrInvalidSetting) {
		t.Fatalf("a 3s lease with a 3s down-after: %v, want an invalid setting", err)
	}
	rdb, err := redisconn.OpenWith(ctx, redisconn.Options{Sentinels: sentinels, MasterName: r.MasterName,
		AckReplicas: redisconn.AckAuto, AckTimeout: time.Second, SentinelLease: config.Defaults().RedisSentinelLease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	if err := exactlyonce.Load(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	keys := keyspace.Space{Prefix: "t" + testenv.Token(4) + ":"}
	key := keys.Item("hot").Hash()
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	stock := int64(1000)
	if _, _, err := s.Upsert(ctx, inventory.Input{ID: "hot", Name: "Hot", Category: "c", PriceCents: 100, Stock: &stock, PerUserLimit: 1000}); err != nil {
		t.Fatal(err)
	}
	waits := func(want int) func() bool {
		return func() bool { n, err := redisconn.WaitCount(ctx, rdb, key); return err == nil && n == want }
	}
	testenv.WaitFor(t, "both replicas in the set", 30*time.Second, waits(2))
	seq := 0
	buy := func() error {
		seq++
		_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "hot", UserID: "u", Quantity: 1, IdempotencyKey: "k" + string(rune('a'+seq%26)) + testenv.Token(4)})
		return err
	}
	if err := buy(); err != nil {
		t.Fatal(err)
	}

	// One replica stalls: a change is never acknowledged while the set holds it.
	stalled := r.Replicas[0]
	stalled.Pause()
	if err := buy(); !errors.Is(err, exactlyonce.ErrNotReplicated) && !errors.Is(err, exactlyonce.ErrTooFewReplicas) {
		t.Fatalf("a purchase with a replica of the set stalled: %v, want not confirmed or refused", err)
	}
	// Refused up front until the Sentinels list the replica down; on a busy machine that window
	// can close between two polls, and the replica then has left the set (checked next).
	testenv.WaitFor(t, "changes refused up front", 30*time.Second, func() bool {
		return (errors.Is(buy(), exactlyonce.ErrTooFewReplicas) && redisconn.Ready(rdb) != nil) || waits(1)()
	})
	testenv.WaitFor(t, "the Sentinels list it down: it leaves the set, changes go on", 60*time.Second, waits(1))
	if err := buy(); err != nil {
		t.Fatalf("a purchase with the stalled replica out of the set: %v", err)
	}
	stalled.Resume()
	testenv.WaitFor(t, "the replica back in the set", 60*time.Second, waits(2))
	if err := buy(); err != nil {
		t.Fatalf("a purchase with both replicas back: %v", err)
	}

	// Two of three Sentinels stall: no majority confirms the primary.
	periods := redisconn.RefusalPeriods()
	r.Sentinels[0].Pause()
	r.Sentinels[1].Pause()
	testenv.WaitFor(t, "changes refused once the lease ran out", 30*time.Second, func() bool {
		return errors.Is(buy(), exactlyonce.ErrPrimaryUnconfirmed) && redisconn.Ready(rdb) != nil
	})
	r.Sentinels[0].Resume()
	r.Sentinels[1].Resume()
	testenv.WaitFor(t, "changes accepted once a majority answers", 30*time.Second, func() bool { return buy() == nil })
	testenv.WaitFor(t, "the refusal period ended", 10*time.Second, func() bool { return redisconn.Ready(rdb) == nil })
	if n := redisconn.RefusalPeriods(); n != periods+1 {
		t.Fatalf("refusal periods counted %d, want %d", n, periods+1)
	}
}
