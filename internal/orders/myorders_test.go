package orders_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestMyOrdersCost: "my orders" costs at most 2 round trips and 2 + 2 x orders commands, 1 with
// a known ETag; a new order or a relayed status change moves the ETag; an item the index names
// without an order of the shopper is skipped and leaves the index. On one node.
func TestMyOrdersCost(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	myOrdersCost(t, rdb, keys)
}

// TestMyOrdersCostOnCluster: the same on the local 3-master Redis Cluster, where the index and
// the items are on different masters (a pipeline to several nodes at once is one round trip).
func TestMyOrdersCostOnCluster(t *testing.T) {
	rdb, keys := testenv.Cluster(t)
	myOrdersCost(t, rdb, keys)
}

func myOrdersCost(t *testing.T, rdb redis.UniversalClient, keys keyspace.Space) {
	ctx := context.Background()
	e := newEnvOn(t, rdb, keys, time.Hour)
	for i := range 40 {
		e.item("cost-"+strconv.Itoa(i), 100, 10)
	}
	buyers := map[string]int{"none": 0, "two": 2, "seven": 7}
	for user, n := range buyers {
		for i := range n {
			item := "cost-" + strconv.Itoa((i*7)%40)
			if user == "seven" && i == 6 {
				item = "cost-0" // two orders of one item: one script call serves both
			}
			e.buy(item, user, 1)
		}
	}
	counter := &commandCounter{}
	rdb.AddHook(counter)
	list := func(user, known string) (orders.Listing, int, int) {
		t.Helper()
		counter.reset()
		l, err := e.ord.ListSince(context.WithValue(ctx, counted{}, true), user, known)
		if err != nil {
			t.Fatalf("list %s: %v", user, err)
		}
		trips, cmds := counter.reset()
		return l, trips, cmds
	}
	tags := map[string]string{}
	for user, n := range buyers {
		l, trips, cmds := list(user, "")
		if len(l.Orders) != n || l.Unchanged {
			t.Fatalf("%s has %d orders listed, bought %d", user, len(l.Orders), n)
		}
		t.Logf("my orders with %d orders: %d round trips, %d commands (bound 2 and %d)", n, trips, cmds, 2+2*n)
		if trips > 2 || cmds > 2+2*n {
			t.Errorf("my orders with %d orders cost %d round trips and %d commands, want at most 2 and %d", n, trips, cmds, 2+2*n)
		}
		l2, trips, cmds := list(user, l.Version)
		if !l2.Unchanged || l2.Version != l.Version || trips != 1 || cmds != 1 {
			t.Errorf("%s with the known tag %s: unchanged %v (tag %s) for %d round trips and %d commands, want 1 command", user, l.Version, l2.Unchanged, l2.Version, trips, cmds)
		}
		tags[user] = l.Version
	}

	// A new order: listed at once, under a new tag.
	o := e.buy("cost-1", "two", 1)
	l, _, _ := list("two", tags["two"])
	if l.Unchanged || l.Version == tags["two"] || !slices.ContainsFunc(l.Orders, func(x orders.Order) bool { return x.ID == o.ID }) {
		t.Fatalf("after a purchase: unchanged %v, tag %s (was %s), %d orders, want %s listed", l.Unchanged, l.Version, tags["two"], len(l.Orders), o.ID)
	}
	bought := l.Version

	// A status change: the tag moves once the relay applied its event (it never runs here).
	if _, err := e.ord.Cancel(ctx, "two", o.ID); err != nil {
		t.Fatal(err)
	}
	if err := orders.NewIndex(rdb, keys).Changed(ctx, testenv.StreamEvents(t, rdb, keys.Item("cost-1").Outbox())); err != nil {
		t.Fatal(err)
	}
	l, _, _ = list("two", bought)
	i := slices.IndexFunc(l.Orders, func(x orders.Order) bool { return x.ID == o.ID })
	if l.Unchanged || l.Version == bought || i < 0 || l.Orders[i].Status != orders.Cancelled {
		t.Fatalf("after the cancel's event: unchanged %v, tag %s (was %s), %+v", l.Unchanged, l.Version, bought, l.Orders)
	}

	// A refused attempt (an api that does not know the item sold out) leaves a field for an
	// item "none" has no order of: the list skips it within the bound, and it leaves the index
	// once it stayed unwritten past the grace (shortened here).
	e.ord.SetUnlistGrace(time.Millisecond)
	e.item("gone", 1, 1)
	e.buy("gone", "two", 1)
	fresh := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{ReservationTTL: time.Hour}))
	if _, err := fresh.Purchase(ctx, inventory.PurchaseRequest{ItemID: "gone", UserID: "none", Quantity: 1}); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("purchase of a sold-out item: %v, want sold out", err)
	}
	l, trips, cmds := list("none", tags["none"])
	if len(l.Orders) != 0 || trips > 2 || cmds > 2 {
		t.Fatalf("after a refused attempt: %d orders for %d round trips and %d commands, want none for at most 2 and 2", len(l.Orders), trips, cmds)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := rdb.HLen(ctx, keys.UserOrderIndex("none")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refused attempt's field is still in the index (%d fields)", n)
		}
		time.Sleep(10 * time.Millisecond)
		if _, err := e.ord.List(ctx, "none"); err != nil { // marks it, then removes it
			t.Fatal(err)
		}
	}
	if l, trips, cmds = list("none", ""); len(l.Orders) != 0 || l.Version != "0" || trips != 1 || cmds != 1 {
		t.Fatalf("once the field left: %d orders, tag %s, %d round trips, %d commands; want none, 0, 1, 1", len(l.Orders), l.Version, trips, cmds)
	}
}

// TestMyOrdersSeeOwnOrdersUnderRace: shoppers buy for the same few users at once while others
// list them: a list read after a purchase was acknowledged holds its order, every list holds
// only its user's orders, each once, and at the end every acknowledged order is listed. On one
// node and on the cluster.
func TestMyOrdersSeeOwnOrdersUnderRace(t *testing.T) {
	t.Run("node", func(t *testing.T) {
		rdb, keys := testenv.Redis(t)
		myOrdersRace(t, newEnvOn(t, rdb, keys, time.Hour), 8, 30)
	})
	t.Run("cluster", func(t *testing.T) {
		rdb, keys := testenv.Cluster(t)
		myOrdersRace(t, newEnvOn(t, rdb, keys, time.Hour), 6, 20)
	})
}

func myOrdersRace(t *testing.T, e *env, buyers, buys int) {
	ctx := context.Background()
	items := []string{"ra", "rb", "rc", "rd", "re", "rf"}
	for _, it := range items {
		e.item(it, 100000, 100000)
	}
	users := []string{"u0", "u1", "u2", "u3"}
	var mu sync.Mutex
	acked := map[string][]string{} // user -> order ids acknowledged
	errs := make(chan error, buyers*buys+1000)
	stop := make(chan struct{})
	var listers sync.WaitGroup
	for w := range 4 {
		listers.Add(1)
		go func() {
			defer listers.Done()
			r := rand.New(rand.NewPCG(uint64(w), 11))
			for {
				select {
				case <-stop:
					return
				default:
				}
				u := users[r.IntN(len(users))]
				mu.Lock()
				before := slices.Clone(acked[u])
				mu.Unlock()
				l, err := e.ord.List(ctx, u)
				if err != nil {
					errs <- err
					return
				}
				if err := holds(u, l, before); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var wg sync.WaitGroup
	for w := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 5))
			for range buys {
				u := users[r.IntN(len(users))]
				res, err := e.inv.Purchase(ctx, inventory.PurchaseRequest{ItemID: items[r.IntN(len(items))], UserID: u, Quantity: 1})
				if err != nil {
					errs <- fmt.Errorf("purchase: %w", err)
					continue
				}
				mu.Lock()
				acked[u] = append(acked[u], res.Order.ID)
				mu.Unlock()
				l, err := e.ord.List(ctx, u) // at once: no wait for the relay
				if err != nil {
					errs <- err
					continue
				}
				if err := holds(u, l, []string{res.Order.ID}); err != nil {
					errs <- fmt.Errorf("right after its purchase: %w", err)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	listers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n := 0
	for _, u := range users {
		l, err := e.ord.List(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		if err := holds(u, l, acked[u]); err != nil {
			t.Error(err)
		}
		if len(l) != len(acked[u]) {
			t.Errorf("%s lists %d orders, %d were acknowledged", u, len(l), len(acked[u]))
		}
		n += len(acked[u])
	}
	if n != buyers*buys {
		t.Errorf("%d purchases acknowledged of %d", n, buyers*buys)
	}
}

// holds checks a list of user's holds only the user's orders, each once, and every id of want.
func holds(user string, list []orders.Order, want []string) error {
	seen := map[string]bool{}
	for _, o := range list {
		if o.UserID != user || seen[o.ID] {
			return fmt.Errorf("%s's list holds %s of %s (seen before: %v)", user, o.ID, o.UserID, seen[o.ID])
		}
		seen[o.ID] = true
	}
	for _, id := range want {
		if !seen[id] {
			return fmt.Errorf("%s's list of %d orders lacks the acknowledged order %s", user, len(list), id)
		}
	}
	return nil
}

// counted marks the context of the calls a commandCounter counts: a list's own commands, not
// the background removal of index fields it may start (Index.unlist).
type counted struct{}

// commandCounter counts the round trips (a command alone, or a pipeline) and commands a
// client sends with a counted context, leaving out a new connection's handshake.
type commandCounter struct {
	mu          sync.Mutex
	trips, cmds int
}

var connSetup = map[string]bool{"hello": true, "client": true, "auth": true, "select": true, "cluster": true, "readonly": true}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(counted{}) != nil && !connSetup[cmd.Name()] {
			c.mu.Lock()
			c.trips++
			c.cmds++
			c.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, cmd := range cmds {
			if !connSetup[cmd.Name()] {
				n++
			}
		}
		if n > 0 && ctx.Value(counted{}) != nil {
			c.mu.Lock()
			c.trips++
			c.cmds += n
			c.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

func (c *commandCounter) reset() (trips, cmds int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	trips, cmds = c.trips, c.cmds
	c.trips, c.cmds = 0, 0
	return trips, cmds
}
