package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/outbox"
	"github.com/flashsale/flashsale/internal/redisconn"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestRelayPublishesOnlyWhatTheReplicasHold: with a replica required, entries the replica
// does not hold yet (it is stalled) are not published, however often the relay tries; once it
// holds them they all are. So Kafka, and Postgres behind it, never get an event a failover to
// that replica could lose.
func TestRelayPublishesOnlyWhatTheReplicasHold(t *testing.T) {
	r := testenv.ReplicatedRedis(t, 1)
	ctx := context.Background()
	rdb := r.AckClient(t, 1, 100*time.Millisecond)
	plain, err := redisconn.Open(ctx, []string{r.Primary.Addr}, 0) // writes without waiting for the replica
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })
	if err := exactlyonce.Load(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "a live replica", 30*time.Second, func() bool { return redisconn.Ready(rdb) == nil })
	keys := keyspace.Space{Prefix: "t" + testenv.Token(4) + ":"}
	stock := int64(100)
	if _, _, err := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{})).Upsert(ctx, inventory.Input{
		ID: "a", Name: "A", Category: "c", PriceCents: 100, Stock: &stock, PerUserLimit: 10}); err != nil {
		t.Fatal(err)
	}
	w := outbox.NewWriter([]string{testenv.Kafka(t, topic, 3).Addr()}, topic)
	t.Cleanup(func() { w.Close() })
	pub := &recordingPublisher{w: w}
	relay := outbox.New(rdb, keys, pub, outbox.Options{Block: 50 * time.Millisecond})
	start(t, relay)
	testenv.WaitFor(t, "the item's event published", 30*time.Second, func() bool { return relay.Stats().Published == 1 })

	r.Replicas[0].Pause()
	unpaused := false
	defer func() {
		if !unpaused {
			r.Replicas[0].Resume()
		}
	}()
	writer := inventory.NewStore(plain, keys, options.Inventory(inventory.Options{}))
	for i := range 5 {
		if _, err := writer.Purchase(ctx, inventory.PurchaseRequest{ItemID: "a", UserID: fmt.Sprint("u", i), Quantity: 1}); err != nil {
			t.Fatal(err)
		}
	}
	failed := relay.Stats().Failures
	testenv.WaitFor(t, "the relay tried twice more", 30*time.Second, func() bool { return relay.Stats().Failures >= failed+2 })
	if n := relay.Stats().Published; n != 1 {
		t.Fatalf("published %d events while the replica lacked 5 of them", n)
	}
	pub.mu.Lock()
	writes := len(pub.writes)
	pub.mu.Unlock()
	if writes != 1 {
		t.Fatalf("%d Kafka writes, want the first only", writes)
	}
	r.Replicas[0].Resume()
	unpaused = true
	testenv.WaitFor(t, "every event published once the replica holds them", 60*time.Second, func() bool { return relay.Stats().Published == 6 })
}
