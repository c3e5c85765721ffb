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
)

// TestExpiryWithoutRequest: a reservation nobody pays gives its stock back by itself once its
// TTL runs out, with only the expirer running; the item stops being known sold out.
func TestExpiryWithoutRequest(t *testing.T) {
	e := newEnv(t, 200*time.Millisecond)
	ctx := context.Background()
	e.item("drop", 3, 3)
	o := e.buy("drop", "alice", 3)
	if _, err := e.inv.Purchase(ctx, inventory.PurchaseRequest{ItemID: "drop", UserID: "bob", Quantity: 1}); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("second buyer: %v, want sold out", err)
	}
	if !e.inv.KnownSoldOut("drop") {
		t.Fatal("the inventory does not know the item is sold out")
	}

	runCtx, stop := context.WithCancel(ctx)
	x := orders.NewExpirer(e.ord, 20*time.Millisecond, 200)
	done := make(chan struct{})
	go func() { x.Run(runCtx); close(done) }()

	deadline := time.Now().Add(15 * time.Second) // a hang guard, not a timing assertion
	for {
		it, err := e.inv.Get(ctx, "drop")
		if err != nil {
			t.Fatal(err)
		}
		// The expirer counts a drain after its store call returned, and the store calls the
		// StockReturned hook before returning: both seen, the sold-out mark must be gone.
		if it.StockLeft == 3 && x.Drained() >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stock never came back (drained %d): %+v", x.Drained(), it)
		}
		time.Sleep(20 * time.Millisecond)
	}
	got, err := e.ord.Get(ctx, "alice", o.ID)
	if err != nil || got.Status != orders.Expired {
		t.Fatalf("order after expiry: %+v %v", got, err)
	}
	if e.inv.KnownSoldOut("drop") {
		t.Error("still known sold out after the stock came back")
	}
	if x.Drained() != 1 || x.Calls() < 1 {
		t.Errorf("drained %d in %d calls, want 1", x.Drained(), x.Calls())
	}
	e.check("drop")
	// The allowance came back too: alice may buy the full limit again.
	e.buy("drop", "alice", 3)

	stop()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// TestLifecycleRace races purchases, pays, cancels, pay+cancel and pay+pay on the same order,
// late pays against the TTL, and three expirers, then checks that every order ended in
// exactly one terminal state that agrees with what its callers were told, and every counter.
func TestLifecycleRace(t *testing.T) {
	const ttl = 40 * time.Millisecond
	e := newEnv(t, ttl)
	ctx := context.Background()
	items := []string{"a", "b", "c"}
	for _, it := range items {
		e.item(it, 150, 6)
	}

	// Counters are consistent at every instant, not just at the end.
	stopWatch := watchItems(items, func(it string) bool {
		v, err := e.rdb.HMGet(ctx, e.keys.Item(it).Hash(), "stock_total", "stock_left", "reserved", "paid").Result()
		if err != nil {
			t.Error(err)
			return false
		}
		n := make([]int64, 4)
		for i := range v {
			n[i], _ = strconv.ParseInt(v[i].(string), 10, 64)
		}
		if n[1]+n[2]+n[3] != n[0] || n[1] < 0 || n[2] < 0 {
			t.Errorf("%s mid-race: left %d + reserved %d + paid %d != total %d", it, n[1], n[2], n[3], n[0])
		}
		return true
	})

	xctx, stopExpirers := context.WithCancel(ctx)
	var expirers []*orders.Expirer
	var xwg sync.WaitGroup
	// Small batches (many calls); intervals from eager to lazy, so some late payments find the
	// reservation overdue but not yet expired and must expire it themselves.
	for _, every := range []time.Duration{time.Millisecond, 7 * time.Millisecond, 30 * time.Millisecond} {
		x := orders.NewExpirer(e.ord, every, 4)
		expirers = append(expirers, x)
		xwg.Add(1)
		go func() { defer xwg.Done(); x.Run(xctx) }()
	}

	type call struct {
		op  string
		err error
	}
	var mu sync.Mutex
	calls := map[string][]call{}
	untouched := map[string]bool{}
	record := func(id, op string, err error) {
		mu.Lock()
		calls[id] = append(calls[id], call{op, err})
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			var inner sync.WaitGroup
			defer inner.Wait()
			for range 70 {
				user := fmt.Sprintf("u%d", r.IntN(40))
				res, err := e.inv.Purchase(ctx, inventory.PurchaseRequest{
					ItemID: items[r.IntN(len(items))], UserID: user, Quantity: 1 + r.Int64N(2)})
				if err != nil {
					continue // sold out or over the limit: the purchase tests cover those
				}
				id := res.Order.ID
				op := func(name string, delay time.Duration) {
					inner.Add(1)
					go func() {
						defer inner.Done()
						time.Sleep(delay)
						var err error
						if name == "pay" {
							_, err = e.ord.Pay(ctx, user, id)
						} else {
							_, err = e.ord.Cancel(ctx, user, id)
						}
						record(id, name, err)
					}()
				}
				switch r.IntN(7) {
				case 0:
					op("pay", 0)
				case 1:
					op("cancel", 0)
				case 2:
					op("pay", 0)
					op("cancel", 0)
				case 3:
					op("pay", 0)
					op("pay", 0)
				case 4:
					mu.Lock()
					untouched[id] = true
					mu.Unlock()
				case 5:
					op("pay", time.Duration(r.Int64N(int64(2*ttl))))
				case 6:
					op("cancel", time.Duration(r.Int64N(int64(2*ttl))))
				}
			}
		}()
	}
	wg.Wait()

	// Every reservation left must expire with no further request.
	e.waitNoneReserved(ctx, items)
	stopExpirers()
	xwg.Wait()
	stopWatch()

	var drained int64
	for _, x := range expirers {
		drained += x.Drained()
	}
	all := map[string]orders.Order{}
	expired := 0
	for _, it := range items {
		l := e.check(it) // one terminal event per order, counters, allowances, paidby, index
		for id, o := range l.Orders {
			all[id] = o
			if o.Status == orders.Expired {
				expired++
			}
		}
	}
	for id, o := range all {
		var wins []string
		for _, c := range calls[id] {
			switch {
			case c.err == nil:
				wins = append(wins, c.op)
			case errors.Is(c.err, orders.ErrExpired):
				if o.Status != orders.Expired {
					t.Errorf("%s: a pay was told expired, but the order is %s", id, o.Status)
				}
			case errors.Is(c.err, orders.ErrInvalidState):
			default:
				t.Errorf("%s: %s failed: %v", id, c.op, c.err)
			}
		}
		want := orders.Expired
		switch {
		case len(wins) > 1:
			t.Errorf("%s: %d calls succeeded: %v", id, len(wins), wins)
		case len(wins) == 1 && wins[0] == "pay":
			want = orders.Paid
		case len(wins) == 1 && wins[0] == "cancel":
			want = orders.Cancelled
		}
		if o.Status != want {
			t.Errorf("%s: status %s, but callers were told %v", id, o.Status, calls[id])
		}
		if untouched[id] && o.Status != orders.Expired {
			t.Errorf("%s: nobody touched it, yet it is %s", id, o.Status)
		}
	}
	if drained < int64(len(untouched)) || drained > int64(expired) {
		t.Errorf("expirers drained %d; %d orders untouched, %d expired", drained, len(untouched), expired)
	}
	t.Logf("%d orders: %d expired (%d by the expirers), %d untouched", len(all), expired, drained, len(untouched))
}

// TestExpireBacklog drains a large backlog of due reservations with three expirers at once:
// each order expires exactly once and every unit comes back. (BenchmarkExpireBacklog is the
// 100k-reservation measurement.)
func TestExpireBacklog(t *testing.T) {
	e := newEnv(t, time.Hour)
	ctx := context.Background()
	const n = 3000
	e.seedDue("bulk", n)
	e.check("bulk")
	var wg sync.WaitGroup
	var expirers []*orders.Expirer
	for range 3 {
		x := orders.NewExpirer(e.ord, time.Hour, 100)
		expirers = append(expirers, x)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := x.Sweep(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	var drained int64
	for _, x := range expirers {
		drained += x.Drained()
	}
	l := e.check("bulk")
	if drained != n || countStatus(l, orders.Expired) != n || l.Left != l.Total || len(l.Held) != 0 {
		t.Errorf("drained %d of %d; expired %d, left %d of %d, held %v", drained, n, countStatus(l, orders.Expired), l.Left, l.Total, len(l.Held))
	}
}

// seedDue writes n due reservations of quantity 1 for item, of exactly the shape the purchase
// script writes in batches of 25 (records, allowances, user orders, one expiry entry per batch,
// order.reserved events), pipelined: a fast way to a large backlog.
func (e *env) seedDue(item string, n int) {
	e.t.Helper()
	ctx := context.Background()
	k := e.keys.Item(item)
	now, err := e.rdb.Time(ctx).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	created := now.UnixMilli() - 60_000
	held := map[string]int64{}
	lists := map[string]string{}
	const users, batch = 1000, 25
	for lo := 1; lo <= n; lo += 1000 {
		pipe := e.rdb.Pipeline()
		var recs []any
		var zs []redis.Z
		for i := lo; i < lo+1000 && i <= n; i++ {
			id, user := item+"."+strconv.Itoa(i), "u"+strconv.Itoa(i%users)
			first := i - (i-1)%batch // the batch's first sequence number
			expires := created + int64(first%5000)
			recs = append(recs, id, fmt.Sprintf("%s|1|100|reserved|%d|%d", user, created, expires))
			if i == first {
				last := min(first+batch-1, n)
				zs = append(zs, redis.Z{Score: float64(expires), Member: fmt.Sprintf("%s.%d-%d", item, first, last)})
			}
			held[user]++
			if lists[user] == "" {
				lists[user] = strconv.Itoa(i)
			} else {
				lists[user] += "," + strconv.Itoa(i)
			}
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: k.Outbox(), Values: []any{"type", "order.reserved",
				"at", created, "item", item, "order", id, "user", user, "quantity", 1, "price_cents", 100}})
		}
		pipe.HSet(ctx, k.Orders(), recs...)
		pipe.ZAdd(ctx, k.Expiry(), zs...)
		if _, err := pipe.Exec(ctx); err != nil {
			e.t.Fatal(err)
		}
	}
	var h, uo []any
	for u, q := range held {
		h = append(h, u, q)
		uo = append(uo, u, lists[u])
	}
	pipe := e.rdb.Pipeline()
	pipe.HSet(ctx, k.Held(), h...)
	pipe.HSet(ctx, k.UserOrders(), uo...)
	pipe.HSet(ctx, k.Hash(), "name", "bulk", "category", "c", "price_cents", 100, "stock_total", n+10,
		"stock_left", 10, "reserved", n, "paid", 0, "per_user_limit", n, "starts_at", 0, "ends_at", 0,
		"seq", n, "version", 1)
	pipe.SAdd(ctx, e.keys.Catalog(), item)
	if _, err := pipe.Exec(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// TestSweepSkipsItemsWithNothingDue: a sweep calls the expire script only for items that have
// a due entry, so a large quiet catalogue costs no script calls.
func TestSweepSkipsItemsWithNothingDue(t *testing.T) {
	e := newEnv(t, time.Hour)
	ctx := context.Background()
	for i := range 30 {
		id := "q" + strconv.Itoa(i)
		e.item(id, 5, 5)
		e.buy(id, "alice", 1) // reserved, due in an hour
	}
	x := orders.NewExpirer(e.ord, time.Hour, 10)
	if n, err := x.Sweep(ctx); err != nil || n != 0 || x.Calls() != 0 {
		t.Fatalf("quiet sweep: expired %d, %d calls, %v", n, x.Calls(), err)
	}
	e.backdate(e.buy("q7", "bob", 2))
	if n, err := x.Sweep(ctx); err != nil || n != 1 || x.Calls() != 1 {
		t.Fatalf("sweep with one due: expired %d, %d calls, %v", n, x.Calls(), err)
	}
	e.check("q7")
}

// TestSweepPassesEntriesItCannotExpire: due entries the expire script must leave (their item
// is being restored, so its hash is missing) sit at the head of their shard's index; a sweep
// reads past them, so the shard's other items still expire, and they expire once the item is
// back.
func TestSweepPassesEntriesItCannotExpire(t *testing.T) {
	e := newEnv(t, time.Hour)
	ctx := context.Background()
	stuck, other := sameShardPair(t)
	e.item(stuck, 10, 10)
	e.item(other, 10, 10)
	var held []orders.Order
	for i := range 5 {
		held = append(held, e.buy(stuck, "u"+strconv.Itoa(i), 1))
	}
	for _, o := range held {
		e.backdate(o)
	}
	// The stuck item's entries fall due first, so they head the index.
	late := e.buy(other, "bob", 1)
	e.backdate(late)
	k := e.keys.Item(stuck)
	var ids []string
	for _, o := range held {
		ids = append(ids, o.ID)
	}
	dues, err := e.rdb.ZMScore(ctx, k.Expiry(), ids...).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.ZAddXX(ctx, k.Expiry(), redisZ(slices.Max(dues)+1, late.ID)).Err(); err != nil {
		t.Fatal(err)
	}
	saved, err := e.rdb.HGetAll(ctx, k.Hash()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Del(ctx, k.Hash()).Err(); err != nil { // what restore_begin leaves
		t.Fatal(err)
	}
	x := orders.NewExpirer(e.ord, time.Hour, 2)
	if n, err := x.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("sweep behind %d stuck entries: expired %d, %v; want the other item's 1", len(held), n, err)
	}
	if got := e.ledger(other).Orders[late.ID].Status; got != orders.Expired {
		t.Fatalf("%s is %s after the sweep, want expired", late.ID, got)
	}
	if err := e.rdb.HSet(ctx, k.Hash(), saved).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := x.Sweep(ctx); err != nil || n != int64(len(held)) {
		t.Fatalf("sweep once the item is back: expired %d, %v; want %d", n, err, len(held))
	}
	e.check(stuck)
	e.check(other)
}

// sameShardPair returns two item ids of one shard.
func sameShardPair(t *testing.T) (string, string) {
	t.Helper()
	first := map[int]string{}
	for i := range 1000 {
		id := "pair" + strconv.Itoa(i)
		s := keyspace.ShardOf(id)
		if prev, ok := first[s]; ok {
			return prev, id
		}
		first[s] = id
	}
	t.Fatal("no two ids of one shard among 1000")
	return "", ""
}
