package redisconn_test

import (
	"context"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/redisconn"
	"github.com/flashsale/flashsale/internal/testenv"
	"github.com/flashsale/flashsale/lua"
)

// Through Sentinel, the client follows a planned failover (SENTINEL FAILOVER): the change is
// noticed once (counted), the scripts are loaded on the new primary, and acknowledged
// purchases go on there, each order made once.
func TestFollowsASentinelFailover(t *testing.T) {
	r := testenv.ReplicatedRedis(t, 1)
	sentinels := r.WithSentinels(t, 1)
	ctx := context.Background()
	rdb, err := redisconn.OpenWith(ctx, redisconn.Options{Sentinels: sentinels, MasterName: r.MasterName,
		AckReplicas: 1, AckTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	if err := lua.Load(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	old := r.Primary.Addr
	if got := redisconn.Primaries(rdb); got != old {
		t.Fatalf("primary %q, want %q", got, old)
	}
	testenv.WaitFor(t, "a live replica", 30*time.Second, func() bool { return redisconn.Ready(rdb) == nil })
	keys := keyspace.Space{Prefix: "t" + testenv.Token(4) + ":"}
	s := inventory.NewStore(rdb, keys, inventory.Options{})
	stock := int64(10)
	if _, _, err := s.Upsert(ctx, inventory.Input{ID: "hot", Name: "Hot", Category: "c", PriceCents: 100, Stock: &stock, PerUserLimit: 5}); err != nil {
		t.Fatal(err)
	}
	// buy retries one purchase with its key until it is answered, as a shopper would.
	buy := func(key string) string {
		var id string
		testenv.WaitFor(t, "purchase "+key+" answered", 60*time.Second, func() bool {
			res, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "hot", UserID: "u1", Quantity: 1, IdempotencyKey: key})
			if err != nil {
				t.Logf("purchase %s: %v (retrying)", key, err)
				return false
			}
			id = res.Order.ID
			return true
		})
		return id
	}
	first := buy("before")
	failovers := redisconn.Failovers()

	promoted := r.Failover(t)
	testenv.WaitFor(t, "the client follows the new primary", 30*time.Second, func() bool {
		return redisconn.Primaries(rdb) == promoted.Addr
	})
	if n := redisconn.Failovers(); n != failovers+1 {
		t.Fatalf("failovers counted: %d, want %d", n, failovers+1)
	}
	testenv.WaitFor(t, "the scripts on the new primary", 30*time.Second, func() bool {
		ok, err := lua.Loaded(ctx, rdb)
		return err == nil && ok
	})
	testenv.WaitFor(t, "the old primary rejoins as a live replica", 60*time.Second, func() bool { return redisconn.Ready(rdb) == nil })
	second := buy("after")
	if again := buy("before"); again != first || second == first {
		t.Fatalf("orders %s, %s; the first again: %s", first, second, again)
	}
	it, err := inventory.NewStore(promoted.Client(), keys, inventory.Options{}).Get(ctx, "hot")
	if err != nil || it.StockLeft != 8 {
		t.Fatalf("the new primary's item: %+v, %v", it, err)
	}
	if n := redisconn.Failovers(); n != failovers+1 {
		t.Fatalf("failovers counted after the sale went on: %d, want %d", n, failovers+1)
	}
}
