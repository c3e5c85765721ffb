package orders_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// env is one test's namespace on the real Redis with an inventory (to reserve stock the way
// shoppers do) and the order store under test.
type env struct {
	t    testing.TB
	rdb  redis.UniversalClient
	keys keyspace.Space
	inv  *inventory.Store
	ord  *orders.Store
}

func newEnv(t testing.TB, ttl time.Duration) *env {
	t.Helper()
	rdb, keys := testenv.Redis(t)
	return newEnvOn(t, rdb, keys, ttl)
}

func newEnvOn(t testing.TB, rdb redis.UniversalClient, keys keyspace.Space, ttl time.Duration) *env {
	inv := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{ReservationTTL: ttl}))
	ord := orders.NewStore(rdb, keys)
	ord.Hooks.StockReturned = inv.ForgetSoldOut
	return &env{t: t, rdb: rdb, keys: keys, inv: inv, ord: ord}
}

func (e *env) item(id string, stock, limit int64) {
	e.t.Helper()
	_, created, err := e.inv.Upsert(context.Background(), inventory.Input{
		ID: id, Name: "Item " + id, Category: "c", PriceCents: 1250, Stock: &stock, PerUserLimit: limit,
	})
	if err != nil || !created {
		e.t.Fatalf("upsert %s: created=%v err=%v", id, created, err)
	}
}

func (e *env) buy(item, user string, qty int64) orders.Order {
	e.t.Helper()
	res, err := e.inv.Purchase(context.Background(), inventory.PurchaseRequest{ItemID: item, UserID: user, Quantity: qty})
	if err != nil {
		e.t.Fatalf("purchase %s by %s: %v", item, user, err)
	}
	return res.Order
}

// backdate moves an order's expires_at one second into the past (record and index), so a test
// sees an overdue reservation without sleeping. An order of a purchase batch's expiry entry
// gets an entry of its own first (the batch entry is split into single-order entries, the form
// a restore writes), so the batch's other orders keep their expiry.
func (e *env) backdate(o orders.Order) {
	e.t.Helper()
	ctx := context.Background()
	k := e.keys.Item(o.ItemID)
	packed, err := e.rdb.HGet(ctx, k.Orders(), o.ID).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	now, err := e.rdb.Time(ctx).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	past := now.UnixMilli() - 1000
	f := strings.Split(packed, "|")
	f[5] = strconv.FormatInt(past, 10)
	if err := e.rdb.HSet(ctx, k.Orders(), o.ID, strings.Join(f, "|")).Err(); err != nil {
		e.t.Fatal(err)
	}
	e.splitEntry(o)
	if err := e.rdb.ZAddXX(ctx, k.Expiry(), redis.Z{Score: float64(past), Member: o.ID}).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// splitEntry replaces the purchase batch entry naming o (if any) by one entry per order.
func (e *env) splitEntry(o orders.Order) {
	e.t.Helper()
	ctx := context.Background()
	k := e.keys.Item(o.ItemID)
	entry := e.ledger(o.ItemID).Expiry[o.ID]
	if entry == "" || entry == o.ID {
		return
	}
	due, err := e.rdb.ZScore(ctx, k.Expiry(), entry).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	item, first, last, _ := keyspace.ExpiryEntry(entry)
	pipe := e.rdb.TxPipeline()
	pipe.ZRem(ctx, k.Expiry(), entry)
	for seq := first; seq <= last; seq++ {
		pipe.ZAdd(ctx, k.Expiry(), redis.Z{Score: due, Member: keyspace.OrderID(item, strconv.FormatUint(seq, 10))})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// ledger is an item's state as the scripts keep it, read back from Redis.
type ledger struct {
	Total, Left, Reserved, Paid, Version int64
	Orders                               map[string]orders.Order
	Held, PaidBy                         map[string]int64
	Expiry                               map[string]string   // order id -> the expiry entry naming it
	Entries                              map[string]bool     // the item's expiry entries
	UserOrders                           map[string][]string // order id -> users whose order list has it
	Events                               map[string][]string // order id -> event types, in order
}

func (e *env) ledger(item string) ledger {
	e.t.Helper()
	ctx := context.Background()
	k := e.keys.Item(item)
	h, err := e.rdb.HGetAll(ctx, k.Hash()).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	l := ledger{
		Total: num(h["stock_total"]), Left: num(h["stock_left"]), Reserved: num(h["reserved"]),
		Paid: num(h["paid"]), Version: num(h["version"]),
		Orders: map[string]orders.Order{}, Held: map[string]int64{}, PaidBy: map[string]int64{},
		Expiry: map[string]string{}, Entries: map[string]bool{}, UserOrders: map[string][]string{},
		Events: map[string][]string{},
	}
	recs, err := e.rdb.HGetAll(ctx, k.Orders()).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	for id, packed := range recs {
		o, err := orders.Unpack(id, item, packed)
		if err != nil {
			e.t.Fatal(err)
		}
		l.Orders[id] = o
	}
	for name, m := range map[string]map[string]int64{k.Held(): l.Held, k.PaidBy(): l.PaidBy} {
		all, err := e.rdb.HGetAll(ctx, name).Result()
		if err != nil {
			e.t.Fatal(err)
		}
		for u, v := range all {
			m[u] = num(v)
		}
	}
	entries, err := e.rdb.ZRange(ctx, k.Expiry(), 0, -1).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, entry := range entries {
		it, first, last, ok := keyspace.ExpiryEntry(entry)
		if !ok {
			e.t.Errorf("malformed expiry entry %q", entry)
			continue
		}
		if it != item { // the index is the shard's: keep this item's
			continue
		}
		l.Entries[entry] = true
		for seq := first; seq <= last; seq++ {
			id := keyspace.OrderID(item, strconv.FormatUint(seq, 10))
			if prev := l.Expiry[id]; prev != "" {
				e.t.Errorf("%s: order %s named by expiry entries %s and %s", item, id, prev, entry)
			}
			l.Expiry[id] = entry
		}
	}
	lists, err := e.rdb.HGetAll(ctx, k.UserOrders()).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	if left := testenv.Matching(e.t, e.rdb, e.keys.Prefix+"*uitems:*"); len(left) > 0 {
		e.t.Errorf("%s: user item zsets were written: %v", item, left)
	}
	for user, list := range lists {
		for _, seq := range strings.Split(list, ",") {
			id := keyspace.OrderID(item, seq)
			l.UserOrders[id] = append(l.UserOrders[id], user)
		}
	}
	msgs, err := e.rdb.XRange(ctx, k.Outbox(), "-", "+").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, m := range msgs {
		if events.IsBatch(m.Values) && events.EntryItem(m.Values) == item {
			evs, err := events.FromBatch(m.ID, m.Values)
			if err != nil {
				e.t.Fatal(err)
			}
			for _, ev := range evs {
				l.Events[ev.OrderID] = append(l.Events[ev.OrderID], ev.Type)
			}
			continue
		}
		if id, ok := m.Values["order"].(string); ok && events.EntryItem(m.Values) == item {
			l.Events[id] = append(l.Events[id], m.Values["type"].(string))
		}
	}
	return l
}

// check asserts an item's invariants and returns its ledger: stock_left + reserved + paid ==
// stock_total; counters and allowances are sums over the orders; the expiry index names each
// reserved order once (a settled one only in a batch's entry); each order is in its user's list
// once and has its order.reserved and, once settled, one terminal event.
func (e *env) check(item string) ledger {
	e.t.Helper()
	l := e.ledger(item)
	if l.Left+l.Reserved+l.Paid != l.Total || l.Left < 0 || l.Reserved < 0 || l.Paid < 0 {
		e.t.Errorf("%s: left %d + reserved %d + paid %d != total %d", item, l.Left, l.Reserved, l.Paid, l.Total)
	}
	var reserved, paid int64
	held, paidBy := map[string]int64{}, map[string]int64{}
	for id, o := range l.Orders {
		want := []string{"order.reserved"}
		switch o.Status {
		case orders.Reserved:
			reserved += o.Quantity
			held[o.UserID] += o.Quantity
			if l.Expiry[id] == "" {
				e.t.Errorf("%s: reserved order %s missing from the expiry index", item, id)
			}
		case orders.Paid:
			paid += o.Quantity
			held[o.UserID] += o.Quantity
			paidBy[o.UserID] += o.Quantity
			want = append(want, "order.paid")
		case orders.Cancelled, orders.Expired:
			want = append(want, "order."+string(o.Status))
		default:
			e.t.Errorf("%s: order %s has status %q", item, id, o.Status)
		}
		if o.Status != orders.Reserved && l.Expiry[id] == id {
			e.t.Errorf("%s: settled order %s (%s) still has its own expiry entry", item, id, o.Status)
		}
		if u := l.UserOrders[id]; len(u) != 1 || u[0] != o.UserID {
			e.t.Errorf("%s: order %s of %s is in the order lists of %v", item, id, o.UserID, u)
		}
		if fmt.Sprint(l.Events[id]) != fmt.Sprint(want) {
			e.t.Errorf("%s: order %s (%s) has events %v, want %v", item, id, o.Status, l.Events[id], want)
		}
	}
	if reserved != l.Reserved || paid != l.Paid {
		e.t.Errorf("%s: counters reserved %d paid %d, orders say reserved %d paid %d", item, l.Reserved, l.Paid, reserved, paid)
	}
	for id, entry := range l.Expiry {
		if _, ok := l.Orders[id]; !ok {
			e.t.Errorf("%s: expiry entry %s names order %s, which does not exist", item, entry, id)
		}
	}
	for id := range l.UserOrders {
		if _, ok := l.Orders[id]; !ok {
			e.t.Errorf("%s: the order lists name order %s, which does not exist", item, id)
		}
	}
	sameMap(e.t, item+" held", l.Held, held)
	sameMap(e.t, item+" paidby", l.PaidBy, paidBy)
	return l
}

func countStatus(l ledger, s orders.Status) int {
	n := 0
	for _, o := range l.Orders {
		if o.Status == s {
			n++
		}
	}
	return n
}

func sameMap(t testing.TB, what string, got, want map[string]int64) {
	t.Helper()
	for u, v := range want {
		if got[u] != v {
			t.Errorf("%s[%s] = %d, want %d", what, u, got[u], v)
		}
	}
	for u, v := range got {
		if _, ok := want[u]; !ok {
			t.Errorf("%s[%s] = %d, want no entry", what, u, v)
		}
	}
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }

// waitNoneReserved waits until no unit of items is reserved: every reservation left has
// expired with no further request (the expirers are running).
func (e *env) waitNoneReserved(ctx context.Context, items []string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, it := range items {
		for {
			n, err := e.rdb.HGet(ctx, e.keys.Item(it).Hash(), "reserved").Int64()
			if err != nil {
				e.t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("%s: %d units still reserved", it, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// watchItems runs check on every item over and over until the returned stop is called (stop
// waits for the round in progress): for invariants that must hold at every instant of a race,
// not only at its end. A check that returns false (a Redis error it reported) ends the watch.
func watchItems(items []string, check func(item string) bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			for _, it := range items {
				if !check(it) {
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return func() { close(done); wg.Wait() }
}
