package inventory_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// An order id never means two orders, whatever a deposed primary does: a replica promoted
// (REPLICAOF NO ONE, as Sentinel does) while its old primary goes on selling makes its orders
// under numbers the old primary never reaches, although both count on from the same last
// order. Both sides sell concurrently; not one id is made by both.
func TestPromotedReplicaNeverReusesOrderIDs(t *testing.T) {
	r := testenv.ReplicatedRedis(t, 1)
	ctx := context.Background()
	keys := keyspace.Space{Prefix: "t" + testenv.Token(4) + ":"}
	deposed, promoted := r.Primary.Client(), r.Replicas[0].Client()
	if err := exactlyonce.Load(ctx, deposed); err != nil {
		t.Fatal(err)
	}
	old := inventory.NewStore(deposed, keys, options.Inventory(inventory.Options{}))
	newItem(t, old, "hot", 100_000, 100_000)
	before := buy(t, old, "before", 5)
	r.WaitInSync(t, r.Primary, 1)
	if err := promoted.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := exactlyonce.Load(ctx, promoted); err != nil {
		t.Fatal(err)
	}
	cur := inventory.NewStore(promoted, keys, options.Inventory(inventory.Options{}))

	var wg sync.WaitGroup
	var onOld, onNew []string
	wg.Add(2)
	go func() { defer wg.Done(); onOld = buy(t, old, "a", 200) }()
	go func() { defer wg.Done(); onNew = buy(t, cur, "b", 200) }()
	wg.Wait()

	owner := map[string]string{}
	for side, ids := range map[string][]string{"before the split": before, "deposed": onOld, "promoted": onNew} {
		for _, id := range ids {
			if o, ok := owner[id]; ok {
				t.Fatalf("order id %s made by the %s primary and by the %s one", id, o, side)
			}
			owner[id] = side
		}
	}
	// Old ids still read: the ones made before the split keep their plain numbers.
	for i := 1; i <= len(before); i++ {
		if owner["hot."+strconv.Itoa(i)] != "before the split" {
			t.Fatalf("the orders before the split: %q, want hot.1 .. hot.%d", before, len(before))
		}
	}
	for _, id := range onNew {
		seq, err := strconv.ParseInt(strings.TrimPrefix(id, "hot."), 10, 64)
		if _, ok := keyspace.ItemOfOrder(id); !ok || err != nil || seq <= 1e9 || seq > 1e9+200 {
			t.Fatalf("the promoted primary's order id %s is not in the next block", id)
		}
	}
}

// buy makes n orders of item hot, one per user prefix+i, concurrently, and returns their ids.
func buy(t *testing.T, s *inventory.Store, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Purchase(context.Background(), inventory.PurchaseRequest{ItemID: "hot", UserID: fmt.Sprintf("%s%d", prefix, i), Quantity: 1})
			if err != nil {
				errs <- err
				return
			}
			ids[i] = res.Order.ID
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("purchase: %v", err)
	}
	return ids
}
