package orders_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestIndexMatchesOrdersUnderChurn: while shoppers buy, pay, cancel, expire and read at once,
// every list holds only the reader's orders, each once; afterwards each user's index, and the
// one rebuilt from outbox events alone (the relay's way), names exactly the user's items.
func TestIndexMatchesOrdersUnderChurn(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	churn(t, newEnvOn(t, rdb, keys, time.Hour), 8, 80)
}

// TestIndexOnCluster: the same on the local 3-master Redis Cluster, where a user's index and
// the items' orders live on different masters.
func TestIndexOnCluster(t *testing.T) {
	rdb, keys := testenv.Cluster(t)
	churn(t, newEnvOn(t, rdb, keys, time.Hour), 6, 40)
}

func churn(t *testing.T, e *env, workers, ops int) {
	ctx := context.Background()
	items := []string{"ia", "ib", "ic", "id", "ie", "if", "ig", "ih"}
	for _, it := range items {
		e.item(it, 1000, 1000)
	}
	users := []string{"u0", "u1", "u2", "u3", "u4", "u5"}
	x := orders.NewExpirer(e.ord, time.Hour, 100)
	lapsing := inventory.NewStore(e.rdb, e.keys, options.Inventory(inventory.Options{ReservationTTL: time.Millisecond}))
	var wg sync.WaitGroup
	errs := make(chan error, workers*ops)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range ops {
				user := users[r.IntN(len(users))]
				switch op := r.IntN(10); {
				case op < 5:
					inv := e.inv
					if r.IntN(4) == 0 {
						inv = lapsing // due at once: the next sweep expires it
					}
					if _, err := inv.Purchase(ctx, inventory.PurchaseRequest{ItemID: items[r.IntN(len(items))], UserID: user, Quantity: 1}); err != nil {
						errs <- fmt.Errorf("purchase: %w", err)
					}
				case op < 8:
					list, err := e.ord.List(ctx, user)
					if err != nil {
						errs <- fmt.Errorf("list: %w", err)
						continue
					}
					seen := map[string]bool{}
					for _, o := range list {
						if o.UserID != user || seen[o.ID] {
							errs <- fmt.Errorf("%s's list holds %s of %s (seen before: %v)", user, o.ID, o.UserID, seen[o.ID])
						}
						seen[o.ID] = true
					}
					if len(list) > 0 {
						o := list[r.IntN(len(list))]
						var err error
						if op == 6 {
							_, err = e.ord.Pay(ctx, user, o.ID)
						} else {
							_, err = e.ord.Cancel(ctx, user, o.ID)
						}
						if err != nil && !errors.Is(err, orders.ErrInvalidState) && !errors.Is(err, orders.ErrExpired) {
							errs <- fmt.Errorf("pay/cancel %s: %w", o.ID, err)
						}
					}
				default:
					if _, err := x.Sweep(ctx); err != nil {
						errs <- fmt.Errorf("sweep: %w", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	want := ordersByUser(t, e, items)
	check := func(how string) {
		t.Helper()
		for _, u := range users {
			indexed, err := e.rdb.HKeys(ctx, e.keys.UserOrderIndex(u)).Result()
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(indexed)
			var of []string // the items the user has orders of
			for _, id := range want[u] {
				item, _ := keyspace.ItemOfOrder(id)
				if !slices.Contains(of, item) {
					of = append(of, item)
				}
			}
			slices.Sort(of)
			if !slices.Equal(indexed, of) {
				t.Errorf("%s: %s's index names items %v,\nthe user has orders of %v", how, u, indexed, of)
			}
			list, err := e.ord.List(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, o := range list {
				ids = append(ids, o.ID)
			}
			slices.Sort(ids)
			if !slices.Equal(ids, want[u]) {
				t.Errorf("%s: %s's list holds %v, the items hold %v", how, u, ids, want[u])
			}
		}
	}
	check("after the churn")
	n := 0
	for _, u := range users {
		n += len(want[u])
	}
	if n == 0 {
		t.Fatal("the churn made no orders")
	}

	// An api that died between its purchases and its index writes: the outbox events alone
	// rebuild every entry.
	for _, u := range users {
		e.rdb.Del(ctx, e.keys.UserOrderIndex(u))
	}
	ix := orders.NewIndex(e.rdb, e.keys)
	for n := range keyspace.Shards {
		if err := ix.Changed(ctx, testenv.StreamEvents(t, e.rdb, e.keys.Shard(n).Outbox())); err != nil {
			t.Fatal(err)
		}
	}
	check("rebuilt from the outbox")
}

// ordersByUser reads every order the items hold, by user, ids sorted.
func ordersByUser(t *testing.T, e *env, items []string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, it := range items {
		all, err := e.rdb.HGetAll(context.Background(), e.keys.Item(it).Orders()).Result()
		if err != nil {
			t.Fatal(err)
		}
		for id, packed := range all {
			o, err := orders.Unpack(id, it, packed)
			if err != nil {
				t.Fatal(err)
			}
			out[o.UserID] = append(out[o.UserID], id)
		}
	}
	for u := range out {
		slices.Sort(out[u])
	}
	return out
}
