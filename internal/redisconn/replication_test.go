package redisconn_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/redisconn"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// Through Sentinel, the client follows a planned failover (SENTINEL FAILOVER): the change is
// noticed once (counted), the scripts are loaded on the new primary, and acknowledged
// purchases go on there, each order made once.
func TestFollowsASentinelFailover(t *testing.T) {
	r := testenv.ReplicatedRedis(t, 1)
	sentinels := r.WithSentinels(t, 1)
	ctx := context.Background()
	rdb, err := redisconn.OpenWith(ctx, redisconn.Options{Sentinels: sentinels, MasterName: r.MasterName,
		AckReplicas: 1, AckTimeout: time.Second, SentinelLease: config.Defaults().RedisSentinelLease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	if err := exactlyonce.Load(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	old := r.Primary.Addr
	if got := redisconn.Primaries(rdb); got != old {
		t.Fatalf("primary %q, want %q", got, old)
	}
	testenv.WaitFor(t, "a live replica", 30*time.Second, func() bool { return redisconn.Ready(rdb) == nil })
	keys := keyspace.Space{Prefix: "t" + testenv.Token(4) + ":"}
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
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
		ok, err := exactlyonce.Loaded(ctx, rdb)
		return err == nil && ok
	})
	testenv.WaitFor(t, "the old primary rejoins as a live replica", 60*time.Second, func() bool { return redisconn.Ready(rdb) == nil })
	second := buy("after")
	if again := buy("before"); again != first || second == first {
		t.Fatalf("orders %s, %s; the first again: %s", first, second, again)
	}
	it, err := inventory.NewStore(promoted.Client(), keys, options.Inventory(inventory.Options{})).Get(ctx, "hot")
	if err != nil || it.StockLeft != 8 {
		t.Fatalf("the new primary's item: %+v, %v", it, err)
	}
	if n := redisconn.Failovers(); n != failovers+1 {
		t.Fatalf("failovers counted after the sale went on: %d, want %d", n, failovers+1)
	}
}

// On a Redis Cluster with a replica per master, each change is confirmed by its own slot's
// replica. A master killed (-9) is replaced by its replica: the change counts once, its slots
// refuse changes (changing nothing) while it has no replica, the others sell on, and once the
// old master is back as a replica the item sells again; stock matches the orders.
func TestClusterConfirmsAndFollowsAFailover(t *testing.T) {
	c := testenv.ClusterWithReplicas(t)
	ctx := context.Background()
	masters := c.Masters(t)
	rdb, err := redisconn.OpenWith(ctx, redisconn.Options{Addrs: masters, AckReplicas: 1, AckTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	if err := exactlyonce.Load(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "every master with a live replica", 30*time.Second, func() bool { return redisconn.Ready(rdb) == nil })
	keys := keyspace.Space{Prefix: "t" + testenv.Token(4) + ":"}
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	const items = 16
	sold := map[string]int64{}
	stock := int64(1000)
	for i := range items {
		id := fmt.Sprint("it", i)
		if _, _, err := s.Upsert(ctx, inventory.Input{ID: id, Name: id, Category: "c", PriceCents: 100, Stock: &stock, PerUserLimit: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	buy := func(id, key string) error {
		_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, UserID: "u", Quantity: 1, IdempotencyKey: key})
		if err == nil {
			sold[id]++
		}
		return err
	}
	for i := range items {
		if err := buy(fmt.Sprint("it", i), fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Kill the master of it0's slot.
	cc := rdb.(*redis.ClusterClient)
	node, err := cc.MasterForKey(ctx, keys.Item("it0").Hash())
	if err != nil {
		t.Fatal(err)
	}
	victim := c.Node(t, node.Options().Addr)
	failovers := redisconn.Failovers()
	victim.Kill()
	testenv.WaitFor(t, "the watch sees it0's slot on a new master", 60*time.Second, func() bool {
		return redisconn.Failovers() > failovers && !strings.Contains(redisconn.Primaries(rdb), victim.Addr)
	})
	if n := redisconn.Failovers(); n != failovers+1 {
		t.Fatalf("failovers counted %d, want %d", n, failovers+1)
	}
	// The promoted master has no replica yet: it0 is refused, nothing changed.
	if err := buy("it0", "k-during"); !errors.Is(err, exactlyonce.ErrTooFewReplicas) {
		t.Fatalf("it0 on a master without a replica: %v", err)
	}
	// An item of another master sells on.
	other := ""
	for i := 1; i < items && other == ""; i++ {
		id := fmt.Sprint("it", i)
		if n, err := cc.MasterForKey(ctx, keys.Item(id).Hash()); err == nil && n.Options().Addr != node.Options().Addr {
			other = id
		}
	}
	if err := buy(other, "k-other"); err != nil {
		t.Fatalf("%s on a healthy master: %v", other, err)
	}
	victim.Start() // rejoins as the promoted master's replica
	testenv.WaitFor(t, "every master with a live replica again", 60*time.Second, func() bool { return redisconn.Ready(rdb) == nil })
	testenv.WaitFor(t, "it0 sells again", 30*time.Second, func() bool { return buy("it0", "k-after") == nil })
	for i := range items {
		id := fmt.Sprint("it", i)
		it, err := s.Get(ctx, id)
		if err != nil || it.StockLeft != stock-sold[id] {
			t.Fatalf("%s: %+v, %v; sold %d", id, it, err, sold[id])
		}
	}
	if n := redisconn.Failovers(); n != failovers+1 {
		t.Fatalf("failovers counted %d after the old master rejoined, want %d", n, failovers+1)
	}
}
