package inventory_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/redisconn"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// replicated starts a private primary with one replica and a store whose changes the replica
// must confirm within ackTimeout. A test that does not need a missed acknowledgement passes a
// generous timeout, so a busy machine cannot refuse its set-up.
func replicated(t *testing.T, ackTimeout time.Duration) (*testenv.Replicated, redis.UniversalClient, keyspace.Space, *inventory.Store) {
	t.Helper()
	r := testenv.ReplicatedRedis(t, 1)
	ctx := context.Background()
	rdb := r.AckClient(t, 1, ackTimeout)
	if err := exactlyonce.Load(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	keys := keyspace.Space{Prefix: "t" + testenv.Token(4) + ":"}
	return r, rdb, keys, inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
}

func waitReady(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	testenv.WaitFor(t, "the watch counts the replica live", 30*time.Second, func() bool { return redisconn.Ready(rdb) == nil })
}

// An acknowledged purchase is on the replica the moment it is answered: WAIT confirmed it.
func TestAcknowledgedPurchaseIsOnTheReplica(t *testing.T) {
	r, rdb, keys, s := replicated(t, 5*time.Second)
	ctx := context.Background()
	waitReady(t, rdb)
	newItem(t, s, "hot", 10, 5)
	res, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "hot", UserID: "u1", Quantity: 2, IdempotencyKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	replica := r.Replicas[0].Client()
	it, err := inventory.NewStore(replica, keys, options.Inventory(inventory.Options{})).Get(ctx, "hot")
	if err != nil || it.StockLeft != 8 {
		t.Fatalf("the replica's item right after the answer: %+v, %v", it, err)
	}
	if o, err := orders.NewStore(replica, keys).Get(ctx, "u1", res.Order.ID); err != nil || o.Quantity != 2 {
		t.Fatalf("the replica's order right after the answer: %+v, %v", o, err)
	}
}

// A purchase the stalled replica does not confirm answers "the outcome is unknown"; the retry
// with the same key, once the replica is back, returns that one order, and stock was taken once.
func TestUnconfirmedPurchaseIsUnknownAndItsRetryReturnsTheOrder(t *testing.T) {
	r, rdb, keys, s := replicated(t, 250*time.Millisecond)
	ctx := context.Background()
	waitReady(t, rdb)
	// The item is made through a patient client: only the purchases below must miss the stall.
	newItem(t, inventory.NewStore(r.AckClient(t, 1, 5*time.Second), keys, options.Inventory(inventory.Options{})), "hot", 10, 5)
	replica := r.Replicas[0]
	key := ""
	// The stall must meet a purchase before the watch notices it (then the purchase is refused
	// with nothing changed, which this loop also checks): try again until it does.
	for i := 0; key == "" && i < 10; i++ {
		waitReady(t, rdb)
		replica.Pause()
		k := "k" + strconv.Itoa(i)
		_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "hot", UserID: "u1", Quantity: 1, IdempotencyKey: k})
		replica.Resume()
		switch {
		case errors.Is(err, exactlyonce.ErrNotReplicated):
			if !errors.Is(err, exactlyonce.ErrOutcomeUnknown) {
				t.Fatalf("not replicated must be an unknown outcome: %v", err)
			}
			key = k
		case errors.Is(err, exactlyonce.ErrTooFewReplicas):
			t.Logf("attempt %d: refused before it ran (the watch saw the stall first)", i)
		default:
			t.Fatalf("purchase with a stalled replica: %v", err)
		}
	}
	if key == "" {
		t.Fatal("no purchase met the stall before the watch did")
	}
	waitReady(t, rdb)
	res, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "hot", UserID: "u1", Quantity: 1, IdempotencyKey: key})
	if err != nil || !res.Replayed {
		t.Fatalf("retry with the same key: %+v, %v", res, err)
	}
	again, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "hot", UserID: "u1", Quantity: 1, IdempotencyKey: key})
	if err != nil || again.Order.ID != res.Order.ID {
		t.Fatalf("second retry: %+v, %v", again, err)
	}
	it, err := s.Get(ctx, "hot")
	if err != nil || it.StockLeft != 9 {
		t.Fatalf("stock after one order (and refused attempts): %+v, %v", it, err)
	}
}

// With no live replica a change is refused before it runs: nothing is written at all, the
// caller is told so, and readiness fails.
func TestTooFewReplicasChangesNothing(t *testing.T) {
	r, rdb, _, s := replicated(t, 5*time.Second)
	ctx := context.Background()
	waitReady(t, rdb)
	newItem(t, s, "hot", 10, 5)
	r.Replicas[0].Kill()
	testenv.WaitFor(t, "readiness fails without the replica", 30*time.Second, func() bool { return redisconn.Ready(rdb) != nil })
	primary := r.Primary.Client()
	before, err := primary.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "hot", UserID: "u1", Quantity: 1, IdempotencyKey: "k"})
	if !errors.Is(err, exactlyonce.ErrTooFewReplicas) || errors.Is(err, exactlyonce.ErrOutcomeUnknown) {
		t.Fatalf("purchase without a live replica: %v", err)
	}
	if _, err := s.AdjustStock(ctx, "hot", 5); !errors.Is(err, exactlyonce.ErrTooFewReplicas) {
		t.Fatalf("restock without a live replica: %v", err)
	}
	after, err := primary.DBSize(ctx).Result()
	if err != nil || after != before {
		t.Fatalf("keys before %d, after %d (%v): something was written", before, after, err)
	}
	if it, err := s.Get(ctx, "hot"); err != nil || it.StockLeft != 10 || it.StockTotal != 10 {
		t.Fatalf("item after refused changes: %+v, %v", it, err)
	}
}

// BenchmarkPurchaseWithReplica: purchases/s of one hot item on a private primary with one
// replica, acknowledged at once (ack0) or once the replica holds them (ack1: a WAIT pipelined
// behind each coalesced batch).
// Run: go test -run - -bench PurchaseWithReplica -benchtime 5s ./internal/inventory/
func BenchmarkPurchaseWithReplica(b *testing.B) {
	r := testenv.ReplicatedRedis(b, 1)
	for _, ack := range []int{0, 1} {
		b.Run("ack"+strconv.Itoa(ack), func(b *testing.B) {
			ctx := context.Background()
			rdb, err := redisconn.OpenWith(ctx, redisconn.Options{Addrs: []string{r.Primary.Addr}, AckReplicas: ack, AckTimeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer rdb.Close()
			if err := exactlyonce.Load(ctx, rdb); err != nil {
				b.Fatal(err)
			}
			testenv.WaitFor(b, "a live replica", 30*time.Second, func() bool { return redisconn.Ready(rdb) == nil })
			keys := keyspace.Space{Prefix: "b" + testenv.Token(4) + ":"}
			s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
			stock := int64(1_000_000_000_000)
			if _, _, err := s.Upsert(ctx, inventory.Input{ID: "hot", Name: "Hot", Category: "c", PriceCents: 1, Stock: &stock, PerUserLimit: 1_000_000}); err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			b.SetParallelism(64)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					u := "u" + strconv.FormatInt(n.Add(1)%5000, 10)
					if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "hot", UserID: u, Quantity: 1}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "purchases/s")
		})
	}
}
