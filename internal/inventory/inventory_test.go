package inventory_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/limits"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

func ptr[T any](v T) *T { return &v }

func newItem(t testing.TB, s *inventory.Store, id string, stock, limit int64) {
	t.Helper()
	_, created, err := s.Upsert(context.Background(), inventory.Input{
		ID: id, Name: "Item " + id, Category: "c", PriceCents: 999, Stock: ptr(stock), PerUserLimit: limit,
	})
	if err != nil || !created {
		t.Fatalf("upsert %s: created=%v err=%v", id, created, err)
	}
}

// outcome of one purchase attempt in a race.
type attempt struct {
	user  string
	qty   int64
	order orders.Order
	err   error
}

// TestNoOversell races thousands of purchases of random quantities (1..limit+1) by random users
// and checks every invariant against the data in Redis.
func TestNoOversell(t *testing.T) {
	cases := []struct{ stock, limit int64 }{
		{10, 9}, // "9" > "10" as strings: the string-compare trap
		{100, 3},
		{1000, 5},
		{57, 1},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("S=%d,limit=%d", tc.stock, tc.limit), func(t *testing.T) {
			rdb, keys := testenv.Redis(t)
			s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
			ctx := context.Background()
			newItem(t, s, "hot", tc.stock, tc.limit)

			const workers = 2000
			users := int(tc.stock/tc.limit) + 20
			results := make([]attempt, workers)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a := attempt{user: "u" + strconv.Itoa(rand.IntN(users)), qty: 1 + rand.Int64N(tc.limit+1)}
					<-start
					res, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "hot", UserID: a.user, Quantity: a.qty})
					a.order, a.err = res.Order, err
					results[i] = a
				}()
			}
			close(start)
			wg.Wait()

			var sold int64
			perUser := map[string]int64{}
			ids := map[string]bool{}
			var refusedSoldOut []int64
			for _, a := range results {
				switch {
				case a.err == nil:
					sold += a.qty
					perUser[a.user] += a.qty
					if ids[a.order.ID] {
						t.Fatalf("order id %s handed out twice", a.order.ID)
					}
					ids[a.order.ID] = true
					if a.order.Quantity != a.qty || a.order.UserID != a.user || a.order.Status != orders.Reserved {
						t.Fatalf("order %+v does not match attempt %+v", a.order, a)
					}
				case errors.Is(a.err, inventory.ErrSoldOut):
					refusedSoldOut = append(refusedSoldOut, a.qty)
				case errors.Is(a.err, inventory.ErrLimitExceeded):
				default:
					t.Fatalf("unexpected purchase error: %v", a.err)
				}
			}
			it, err := s.Get(ctx, "hot")
			if err != nil {
				t.Fatal(err)
			}
			if sold > tc.stock {
				t.Fatalf("oversold: sold %d of %d", sold, tc.stock)
			}
			if it.StockLeft != tc.stock-sold || it.Reserved != sold || it.StockTotal != tc.stock {
				t.Fatalf("counters: left=%d reserved=%d total=%d, sold %d of %d", it.StockLeft, it.Reserved, it.StockTotal, sold, tc.stock)
			}
			for _, q := range refusedSoldOut {
				if q <= it.StockLeft {
					t.Fatalf("undersold: refused %d as sold out with %d left", q, it.StockLeft)
				}
			}
			k := keys.Item("hot")
			held, _ := rdb.HGetAll(ctx, k.Held()).Result()
			for u, q := range perUser {
				if q > tc.limit {
					t.Fatalf("user %s holds %d > limit %d", u, q, tc.limit)
				}
				if held[u] != strconv.FormatInt(q, 10) {
					t.Fatalf("held[%s] = %q, orders say %d", u, held[u], q)
				}
			}
			if len(held) != len(perUser) {
				t.Fatalf("held has %d users, orders %d", len(held), len(perUser))
			}
			// Every order record is accounted for: the orders hash, the expiry index and the
			// outbox hold exactly the successful attempts.
			recs, _ := rdb.HGetAll(ctx, k.Orders()).Result()
			var recQty int64
			for id, packed := range recs {
				o, err := orders.Unpack(id, "hot", packed)
				if err != nil || !ids[id] {
					t.Fatalf("stray order %s %q (%v)", id, packed, err)
				}
				recQty += o.Quantity
			}
			if len(recs) != len(ids) || recQty != sold {
				t.Fatalf("order records: %d (qty %d), successes %d (qty %d)", len(recs), recQty, len(ids), sold)
			}
			// The expiry entries (one per script call) name each order exactly once, and the
			// user index lists each user's orders.
			if named := expiryOrders(t, rdb, k); !maps.Equal(named, ids) {
				t.Fatalf("expiry index names %d orders, want the %d made", len(named), len(ids))
			}
			listed := userIndexOrders(t, rdb, k)
			for id := range ids {
				o, _ := orders.Unpack(id, "hot", recs[id])
				if listed[id] != o.UserID {
					t.Fatalf("order %s of %s: user index says %q", id, o.UserID, listed[id])
				}
			}
			if len(listed) != len(ids) {
				t.Fatalf("user index lists %d orders, want %d", len(listed), len(ids))
			}
			// The shard-wide user item zsets are gone from the layout: nothing writes one.
			if left := testenv.Matching(t, rdb, keys.Prefix+"*uitems:*"); len(left) > 0 {
				t.Fatalf("purchases wrote user item zsets: %v", left)
			}
			// One order.reserved event per order (batches share an entry), each with its own
			// event id, plus item.upserted.
			evs := testenv.StreamEvents(t, rdb, k.Outbox())
			reserved, eventIDs := map[string]bool{}, map[string]bool{}
			for _, ev := range evs {
				if eventIDs[ev.EventID] {
					t.Fatalf("event id %s twice", ev.EventID)
				}
				eventIDs[ev.EventID] = true
				if ev.Type == events.OrderReserved {
					if !ids[ev.OrderID] || reserved[ev.OrderID] || recs[ev.OrderID] == "" {
						t.Fatalf("order.reserved of %s: made %v, seen before %v", ev.OrderID, ids[ev.OrderID], reserved[ev.OrderID])
					}
					reserved[ev.OrderID] = true
				}
			}
			if len(evs) != len(ids)+1 || len(reserved) != len(ids) {
				t.Fatalf("outbox has %d events (%d order.reserved), want %d", len(evs), len(reserved), len(ids)+1)
			}
			if sold < tc.stock && len(refusedSoldOut) == 0 && len(perUser) < users {
				t.Logf("note: stock left %d", it.StockLeft)
			}
		})
	}
}

// TestIdempotentConcurrentReplay sends the same key 50 times at once: one order, stock taken once.
func TestIdempotentConcurrentReplay(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	ctx := context.Background()
	newItem(t, s, "idem", 100, 5)

	var wg sync.WaitGroup
	var created atomic.Int32
	ids := make([]string, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "idem", UserID: "bob", Quantity: 2, IdempotencyKey: "click-1"})
			if err != nil {
				t.Errorf("purchase: %v", err)
				return
			}
			if !res.Replayed {
				created.Add(1)
			}
			ids[i] = res.Order.ID
		}()
	}
	wg.Wait()
	if created.Load() != 1 {
		t.Fatalf("%d purchases created an order, want 1", created.Load())
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("replays returned different orders: %s vs %s", id, ids[0])
		}
	}
	it, _ := s.Get(ctx, "idem")
	if it.StockLeft != 98 {
		t.Fatalf("stock_left = %d, want 98", it.StockLeft)
	}
	// The same key for another user or item is a different purchase.
	res, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "idem", UserID: "carol", Quantity: 1, IdempotencyKey: "click-1"})
	if err != nil || res.Replayed {
		t.Fatalf("other user with the same key: replayed=%v err=%v", res.Replayed, err)
	}
}

// TestReplayAfterSellOut: a retry after the item sold out gets its order back, not sold_out.
func TestReplayAfterSellOut(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	ctx := context.Background()
	newItem(t, s, "last", 1, 1)
	first, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "last", UserID: "a", Quantity: 1, IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "last", UserID: "b", Quantity: 1}); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("want sold out, got %v", err)
	}
	again, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "last", UserID: "a", Quantity: 1, IdempotencyKey: "k"})
	if err != nil || !again.Replayed || again.Order.ID != first.Order.ID {
		t.Fatalf("replay after sell-out: %+v %v", again, err)
	}
}

// TestRestockRacingPurchases: concurrent stock deltas and purchases; every unit is accounted for.
func TestRestockRacingPurchases(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	ctx := context.Background()
	newItem(t, s, "rs", 50, 1000)

	var loaded, sold atomic.Int64
	loaded.Store(50)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 25 {
				if i%4 == 0 {
					delta := int64(rand.IntN(10) - 4)
					if delta == 0 {
						delta = 3
					}
					_, err := s.AdjustStock(ctx, "rs", delta)
					switch {
					case err == nil:
						loaded.Add(delta)
					case errors.Is(err, inventory.ErrInvalidState):
					default:
						t.Errorf("adjust: %v", err)
					}
					continue
				}
				q := int64(1 + rand.IntN(3))
				_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "rs", UserID: fmt.Sprintf("u%d", i), Quantity: q, IdempotencyKey: fmt.Sprintf("%d-%d", i, j)})
				switch {
				case err == nil:
					sold.Add(q)
				case errors.Is(err, inventory.ErrSoldOut):
				default:
					t.Errorf("purchase: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	it, err := s.Get(ctx, "rs")
	if err != nil {
		t.Fatal(err)
	}
	if it.StockTotal != loaded.Load() {
		t.Fatalf("stock_total %d, loaded %d", it.StockTotal, loaded.Load())
	}
	if it.StockLeft < 0 || it.StockLeft+it.Reserved != it.StockTotal || it.Reserved != sold.Load() {
		t.Fatalf("left %d + reserved %d != total %d (sold %d)", it.StockLeft, it.Reserved, it.StockTotal, sold.Load())
	}
}

// TestScriptCacheFlushed: after SCRIPT FLUSH (as after a Redis restart) purchases and stock
// changes keep working through the EVAL fallback, with no restart of the caller.
func TestScriptCacheFlushed(t *testing.T) {
	rdb, keys, _ := testenv.PrivateRedis(t)
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	ctx := context.Background()
	newItem(t, s, "fl", 10, 10)
	for i := range 6 {
		if i%2 == 0 {
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "fl", UserID: "u", Quantity: 1}); err != nil {
			t.Fatalf("purchase %d after SCRIPT FLUSH: %v", i, err)
		}
		if _, err := s.AdjustStock(ctx, "fl", 1); err != nil {
			t.Fatalf("adjust after SCRIPT FLUSH: %v", err)
		}
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		res, err := s.UpsertMany(ctx, []inventory.Input{
			{ID: "fl2", Name: "n", PriceCents: 1, PerUserLimit: 1}, {ID: "fl3", Name: "n", PriceCents: 1, PerUserLimit: 1},
		})
		if err != nil || res[0].Err != nil || res[1].Err != nil || res[0].Created != (i == 0) {
			t.Fatalf("import after SCRIPT FLUSH: %+v %v", res, err)
		}
	}
	if ok, _ := exactlyonce.Loaded(ctx, rdb); ok {
		t.Log("scripts re-cached by EVAL")
	}
}

// commandCounter counts the commands a client sends (pipelines count each command).
// connSetup names the commands go-redis sends when it opens a connection.
var connSetup = map[string]bool{"hello": true, "client": true, "auth": true, "select": true}

type commandCounter struct {
	mu    sync.Mutex
	names map[string]int
	trips int
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if connSetup[cmd.Name()] {
			return next(ctx, cmd) // a new pooled connection's handshake, not a purchase's work
		}
		c.mu.Lock()
		c.names[cmd.Name()]++
		c.trips++
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.mu.Lock()
		counted := false
		for _, cmd := range cmds {
			if !connSetup[cmd.Name()] {
				c.names[cmd.Name()]++
				counted = true
			}
		}
		if counted {
			c.trips++
		}
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (c *commandCounter) reset() (trips int, names map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	trips, names = c.trips, c.names
	c.trips, c.names = 0, map[string]int{}
	return trips, names
}

// TestPurchaseIsOneRoundTrip: a purchase costs exactly one round trip: the script call
// (EVALSHA) with the blind write of its user's order index (HINCRBY, orders.Index: another
// slot, so not in the script) in the same pipeline; a burst of concurrent purchases of one
// item costs one such round trip per batch, with one HINCRBY per shopper of the batch.
func TestPurchaseIsOneRoundTrip(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	counter := &commandCounter{names: map[string]int{}}
	rdb.AddHook(counter)
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{PurchaseLimit: limits.Policy{Rate: 100, Period: time.Second, Burst: 100}}))
	ctx := context.Background()
	newItem(t, s, "rt", 1000, 1000)

	counter.reset()
	if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "rt", UserID: "u", Quantity: 1, IdempotencyKey: "x"}); err != nil {
		t.Fatal(err)
	}
	trips, names := counter.reset()
	if trips != 1 || names["evalsha"] != 1 || names["hincrby"] != 1 || len(names) != 2 {
		t.Fatalf("one purchase cost %d round trips %v, want exactly 1: 1 evalsha and 1 hincrby", trips, names)
	}

	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "rt", UserID: fmt.Sprintf("u%d", i), Quantity: 1}); err != nil {
				t.Errorf("purchase: %v", err)
			}
		}()
	}
	wg.Wait()
	trips, names = counter.reset()
	calls := names["evalsha"]
	if calls < 1 || calls > 200 || trips != calls || names["hincrby"] != 200 || len(names) != 2 {
		t.Fatalf("200 concurrent purchases cost %d round trips %v", trips, names)
	}
	t.Logf("200 concurrent purchases of one item took %d script calls", calls)
}

// TestPurchaseRefusals: every refusal of the purchase script, in a table.
func TestPurchaseRefusals(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{PurchaseLimit: limits.Policy{Rate: 1, Period: time.Hour, Burst: 2}}))
	ctx := context.Background()
	future := time.Now().Add(time.Hour)
	past := time.Now().Add(-time.Hour)
	long := time.Now().Add(-2 * time.Hour)
	mk := func(in inventory.Input) {
		if _, _, err := s.Upsert(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	mk(inventory.Input{ID: "soon", Name: "Soon", PriceCents: 1, Stock: ptr[int64](5), PerUserLimit: 1, StartsAt: &future})
	endSale(t, rdb, keys, s, inventory.Input{ID: "over", Name: "Over", PriceCents: 1, Stock: ptr[int64](5), PerUserLimit: 1, StartsAt: &long}, past)
	newItem(t, s, "ten", 10, 9)
	newItem(t, s, "big", 100, 10)

	cases := []struct {
		name string
		req  inventory.PurchaseRequest
		want error
	}{
		{"unknown item", inventory.PurchaseRequest{ItemID: "nope", UserID: "u", Quantity: 1}, inventory.ErrNotFound},
		{"bad item id", inventory.PurchaseRequest{ItemID: "a b", UserID: "u", Quantity: 1}, inventory.ErrNotFound},
		{"zero quantity", inventory.PurchaseRequest{ItemID: "ten", UserID: "u", Quantity: 0}, inventory.ErrInvalid},
		{"negative quantity", inventory.PurchaseRequest{ItemID: "ten", UserID: "u", Quantity: -3}, inventory.ErrInvalid},
		{"huge quantity", inventory.PurchaseRequest{ItemID: "ten", UserID: "u", Quantity: 1 << 40}, inventory.ErrInvalid},
		{"bad idempotency key", inventory.PurchaseRequest{ItemID: "ten", UserID: "u", Quantity: 1, IdempotencyKey: "tab\there"}, inventory.ErrInvalid},
		{"not started", inventory.PurchaseRequest{ItemID: "soon", UserID: "u", Quantity: 1}, inventory.ErrSaleNotStarted},
		{"ended", inventory.PurchaseRequest{ItemID: "over", UserID: "u", Quantity: 1}, inventory.ErrSaleEnded},
		{"over the per-user limit", inventory.PurchaseRequest{ItemID: "ten", UserID: "u", Quantity: 10}, inventory.ErrLimitExceeded},
		{"9 of 10 (string compare trap)", inventory.PurchaseRequest{ItemID: "ten", UserID: "v", Quantity: 9}, nil},
		{"2 of the last 1", inventory.PurchaseRequest{ItemID: "ten", UserID: "w", Quantity: 2}, inventory.ErrSoldOut},
		{"1 of the last 1", inventory.PurchaseRequest{ItemID: "ten", UserID: "w", Quantity: 1}, nil},
		{"sold out from memory", inventory.PurchaseRequest{ItemID: "ten", UserID: "x", Quantity: 1}, inventory.ErrSoldOut},
		{"burst 1 of 2", inventory.PurchaseRequest{ItemID: "big", UserID: "r", Quantity: 1}, nil},
		{"burst 2 of 2", inventory.PurchaseRequest{ItemID: "big", UserID: "r", Quantity: 1}, nil},
		{"rate limited", inventory.PurchaseRequest{ItemID: "big", UserID: "r", Quantity: 1}, limits.ErrRateLimited},
		{"another user is not limited", inventory.PurchaseRequest{ItemID: "big", UserID: "q", Quantity: 1}, nil},
	}
	for _, tc := range cases {
		_, err := s.Purchase(ctx, tc.req)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
		var pe *inventory.PurchaseError
		if errors.Is(tc.want, limits.ErrRateLimited) && (!errors.As(err, &pe) || pe.Limit == nil || pe.Limit.RetryAfter <= 0) {
			t.Errorf("%s: refusal carries no retry time: %#v", tc.name, err)
		}
	}
	// Refusals changed nothing.
	it, _ := s.Get(ctx, "ten")
	if it.StockLeft != 0 || it.Reserved != 10 {
		t.Fatalf("ten: left %d reserved %d", it.StockLeft, it.Reserved)
	}
	for _, id := range []string{"soon", "over"} {
		it, _ := s.Get(ctx, id)
		if it.StockLeft != 5 || it.Reserved != 0 {
			t.Fatalf("%s changed by refusals: %+v", id, it)
		}
	}
}

// TestScriptRejectsMalformedBatch: the purchase script refuses bad shared arguments before
// writing anything.
func TestScriptRejectsMalformedBatch(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	ctx := context.Background()
	newItem(t, s, "m", 5, 5)
	k := keys.Item("m")
	base := []string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(), k.PurchaseLimits(), k.QueueTickets(), k.UserOrders()}
	// Each attempt's keys (purchase.lua).
	per := []string{k.Idempotency("u", "")}
	idem := []string{k.Idempotency("u", "k1")}
	cases := []struct {
		name string
		keys []string
		args []any
	}{
		{"no attempts", base, []any{600000, 1000, 0, 0, 0, "m"}},
		{"ttl not a number", append(base, per...), []any{"x", 1000, 0, 0, 0, "m", "u", 1, "", ""}},
		{"negative ttl", append(base, per...), []any{-5, 1000, 0, 0, 0, "m", "u", 1, "", ""}},
		{"rate without period", append(base, per...), []any{600000, 1000, 5, 0, 1, "m", "u", 1, "", ""}},
		{"args short", append(base, per...), []any{600000, 1000, 0, 0, 0, "m", "u", 1}},
		{"two keys per attempt", append(base, k.Hash(), k.Idempotency("u", "")), []any{600000, 1000, 0, 0, 0, "m", "u", 1, "", ""}},
		// tonumber reads 'inf', 'nan' and fractions: a bad ttl fails a write half-way through an
		// attempt (SET PX 1.5, ZADD nan) or packs an order that never reads back (expires 1.5);
		// a non-finite rate or burst silently switches the limiter off.
		{"fractional ttl", append(base, per...), []any{"1.5", 1000, 0, 0, 0, "m", "u", 1, "", ""}},
		{"infinite ttl", append(base, per...), []any{"inf", 1000, 0, 0, 0, "m", "u", 1, "", ""}},
		{"nan ttl", append(base, per...), []any{"nan", 1000, 0, 0, 0, "m", "u", 1, "", ""}},
		{"fractional idempotency ttl", append(base, idem...), []any{600000, "1.5", 0, 0, 0, "m", "u", 1, "k1", ""}},
		{"infinite idempotency ttl", append(base, idem...), []any{600000, "inf", 0, 0, 0, "m", "u", 1, "k1", ""}},
		{"nan rate", append(base, per...), []any{600000, 1000, "nan", 1000, 1, "m", "u", 1, "", ""}},
		{"infinite rate", append(base, per...), []any{600000, 1000, "inf", 1000, 1, "m", "u", 1, "", ""}},
		{"nan period", append(base, per...), []any{600000, 1000, 1, "nan", 1, "m", "u", 1, "", ""}},
		{"infinite period", append(base, per...), []any{600000, 1000, 1, "inf", 1, "m", "u", 1, "", ""}},
		{"infinite burst", append(base, per...), []any{600000, 1000, 1, 1000, "inf", "m", "u", 1, "", ""}},
		// The rate-limit hash lives burst*period/rate: one no PEXPIRE takes is refused up front.
		{"limiter lifetime too long", append(base, per...), []any{600000, 1000, 1, 1e12, 1e6, "m", "u", 1, "", ""}},
		{"too many attempts", append(base, slices.Repeat(per, 257)...), slices.Concat([]any{600000, 1000, 0, 0, 0, "m"}, slices.Repeat([]any{"u", 1, "", ""}, 257))},
	}
	for _, tc := range cases {
		if err := inventory.PurchaseScript.Run(ctx, rdb, tc.keys, tc.args...).Err(); err == nil {
			t.Errorf("%s: script accepted it", tc.name)
		}
	}
	// A non-numeric quantity inside a batch is refused for that attempt only.
	res, err := inventory.PurchaseScript.Run(ctx, rdb, append(base, per...), 600000, 1000, 0, 0, 0, "m", "u", "1x", "", "").Slice()
	if err != nil || len(res) != 5 || res[0] != "I" || !strings.HasPrefix(res[4].(string), "5|999|") {
		t.Fatalf("quantity '1x': %v %v", res, err)
	}
	it, _ := s.Get(ctx, "m")
	if it.StockLeft != 5 || rdb.XLen(ctx, k.Outbox()).Val() != 1 {
		t.Fatalf("malformed calls changed state: %+v", it)
	}
	// Nor did they leave half an attempt behind (an order without its stock taken).
	for _, key := range []string{k.Orders(), k.Held(), k.Expiry(), k.UserOrders(), k.Idempotency("u", "k1"), k.PurchaseLimits()} {
		if n := rdb.Exists(ctx, key).Val(); n != 0 {
			t.Errorf("malformed calls wrote %s", key)
		}
	}
}

// TestBatchSeesItsOwnWrites: purchase.lua sends a batch's shared writes at the end, so later
// attempts must see earlier ones through its tables: a key replays the order made just before,
// a user's second attempt meets the rate and per-user limits the first moved. The limiter's
// state is one hash per item whose TTL covers every TAT in it.
func TestBatchSeesItsOwnWrites(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	ctx := context.Background()
	newItem(t, s, "b", 10, 1)
	k := keys.Item("b")
	run := func(rate, period, burst int, attempts ...[]string) []string {
		t.Helper()
		ks := []string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(), k.PurchaseLimits(), k.QueueTickets(), k.UserOrders()}
		args := []any{600000, 86400000, rate, period, burst, "b"}
		for _, a := range attempts { // user, idempotency key
			ks = append(ks, k.Idempotency(a[0], a[1]))
			args = append(args, a[0], 1, a[1], "")
		}
		res, err := inventory.PurchaseScript.Run(ctx, rdb, ks, args...).Slice()
		if err != nil || len(res) != 4*len(attempts)+1 { // the attempts' four values, then the batch's
			t.Fatalf("batch: %v %v", res, err)
		}
		// Each attempt's values joined by '|' (letter|value|limiter's a|b), then the batch's.
		var out []string
		for i := range attempts {
			var v []string
			for _, x := range res[4*i : 4*i+4] {
				v = append(v, fmt.Sprint(x))
			}
			out = append(out, strings.Join(v, "|"))
		}
		return append(out, fmt.Sprint(res[4*len(attempts)]))
	}

	res := run(1, 60000, 1, []string{"u1", "k"}, []string{"u1", "k"}, []string{"u2", ""}, []string{"u2", ""})
	// Created (the limiter: 0 left, a minute to refill), replayed (the whole order; the limiter
	// not reached), created, rate limited (a minute to wait, a minute to refill).
	want := []string{`^C\|1\|0\|600[01][0-9]$`, `^R\|b\.1\|u1\|1\|999\|reserved\|[0-9]+\|[0-9]+\|-1$`,
		`^C\|2\|0\|600[01][0-9]$`, `^L\|0\|600[01][0-9]\|600[01][0-9]$`, `^8\|999\|[0-9]+\|[0-9]+$`}
	for i, w := range want {
		if !regexp.MustCompile(w).MatchString(res[i]) {
			t.Fatalf("reply %d: %q, want %s", i+1, res[i], w)
		}
	}
	// The replay is the order made a moment before in the batch, as the orders hash holds it,
	// with the batch's times.
	batch := strings.Split(res[4], "|")
	if packed := rdb.HGet(ctx, k.Orders(), "b.1").Val(); res[1] != "R|b.1|"+packed+"|-1" ||
		packed != "u1|1|999|reserved|"+batch[2]+"|"+batch[3] {
		t.Fatalf("replay in the same batch: %q, the order %q, the batch %q", res[1], packed, res[4])
	}
	res = run(0, 0, 0, []string{"u4", ""}, []string{"u4", ""})
	if res[0] != "C|3|-1|-1" || res[1] != "X|0|-1|-1" || !strings.HasPrefix(res[2], "7|999|") {
		t.Fatalf("per-user limit in one batch: %q", res)
	}

	held := rdb.HGetAll(ctx, k.Held()).Val()
	if len(held) != 3 || held["u1"] != "1" || held["u2"] != "1" || held["u4"] != "1" {
		t.Fatalf("held: %v", held)
	}
	// Two calls made the 3 orders: one expiry entry per call, b.1-2 and b.3.
	if n := rdb.HLen(ctx, k.Orders()).Val(); n != 3 || !slices.Equal(rdb.ZRange(ctx, k.Expiry(), 0, -1).Val(), []string{"b.1-2", "b.3"}) {
		t.Fatalf("orders %d, expiry index %v, want 3 orders and b.1-2, b.3", n, rdb.ZRange(ctx, k.Expiry(), 0, -1).Val())
	}
	if uo := rdb.HGetAll(ctx, k.UserOrders()).Val(); !maps.Equal(uo, map[string]string{"u1": "1", "u2": "2", "u4": "3"}) {
		t.Fatalf("user orders hash: %v", uo)
	}
	if it, _ := s.Get(ctx, "b"); it.StockLeft != 7 || it.Reserved != 3 {
		t.Fatalf("item: %+v", it)
	}
	tats := rdb.HGetAll(ctx, k.PurchaseLimits()).Val()
	if len(tats) != 2 || tats["u1"] == "" || tats["u2"] == "" {
		t.Fatalf("rate-limit hash: %v", tats)
	}
	// burst 1 of 1 per minute: every TAT is at most a minute ahead, so is the hash's TTL.
	if ttl := rdb.PTTL(ctx, k.PurchaseLimits()).Val(); ttl <= 0 || ttl > 60001*time.Millisecond {
		t.Fatalf("rate-limit hash TTL %v, want (0, 60.001s]", ttl)
	}
	// A later batch under a shorter policy does not cut the TTL the longer one needs.
	run(1000, 1000, 1, []string{"u5", ""})
	if ttl := rdb.PTTL(ctx, k.PurchaseLimits()).Val(); ttl < 50*time.Second {
		t.Fatalf("rate-limit hash TTL cut to %v", ttl)
	}
}

// TestItemScriptsRejectBadNumbers: upsert_item and adjust_stock refuse what tonumber reads but
// no item may hold ('inf', a fraction, an explicit negative stock) and write nothing.
func TestItemScriptsRejectBadNumbers(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	ctx := context.Background()
	newItem(t, s, "n", 5, 5)
	k := keys.Item("n")
	ik := []string{k.Hash(), k.Outbox()}
	// id name category price stock per_user starts ends
	upserts := []struct {
		name string
		args []any
	}{
		{"infinite price", []any{"n", "N", "c", "inf", "", 5, 0, 0, 0, 0, 0}},
		{"fractional price", []any{"n", "N", "c", "9.5", "", 5, 0, 0, 0, 0, 0}},
		{"infinite per-user limit", []any{"n", "N", "c", 999, "", "inf", 0, 0, 0, 0, 0}},
		{"infinite end", []any{"n", "N", "c", 999, "", 5, 0, "inf", 0, 0, 0}},
		{"negative stock", []any{"n", "N", "c", 999, -1, 5, 0, 0, 0, 0, 0}},
		{"queue rate without the rest", []any{"n", "N", "c", 999, "", 5, 0, 0, 5, 0, 0}},
		{"fractional queue ttl", []any{"n", "N", "c", 999, "", 5, 0, 0, 5, 10, "1.5"}},
	}
	for _, tc := range upserts {
		if err := inventory.UpsertItemScript.Run(ctx, rdb, ik, tc.args...).Err(); err == nil {
			t.Errorf("upsert_item, %s: script accepted it", tc.name)
		}
	}
	if err := inventory.UpsertItemScript.Run(ctx, rdb, []string{keys.Item("fresh").Hash(), keys.Item("fresh").Outbox()},
		"fresh", "F", "c", 1, -1, 5, 0, 0, 0, 0, 0).Err(); err == nil {
		t.Errorf("upsert_item: created an item from stock -1")
	}
	for _, delta := range []string{"inf", "-inf", "nan", "1.5", "0"} {
		if err := inventory.AdjustStockScript.Run(ctx, rdb, ik, "n", delta).Err(); err == nil {
			t.Errorf("adjust_stock, delta %s: script accepted it", delta)
		}
	}
	h := rdb.HGetAll(ctx, k.Hash()).Val()
	if h["price_cents"] != "999" || h["stock_total"] != "5" || h["stock_left"] != "5" ||
		h["per_user_limit"] != "5" || h["ends_at"] != "0" || h["version"] != "1" {
		t.Fatalf("bad numbers changed the item: %v", h)
	}
	if n := rdb.XLen(ctx, k.Outbox()).Val(); n != 1 {
		t.Fatalf("bad numbers appended %d events", n-1)
	}
	if n := rdb.Exists(ctx, keys.Item("fresh").Hash()).Val(); n != 0 {
		t.Fatalf("bad numbers created an item")
	}
}

// TestAdjustStockStaysExact: adjust_stock counts in Lua numbers (doubles), so above 2^53 a sum
// drops units: 2^53 - 2 plus 3 read back as 2^53, with a stock.adjusted event of delta 3 that
// the record would add in full. An addition past MaxStockTotal is refused and writes nothing;
// one up to it lands exactly.
func TestAdjustStockStaysExact(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	ctx := context.Background()
	newItem(t, s, "big", 5, 5)
	k := keys.Item("big")
	// An item that many large additions brought near the bound (each call adds at most 1e12).
	near := strconv.FormatInt(inventory.MaxStockTotal-2, 10)
	rdb.HSet(ctx, k.Hash(), "stock_total", near, "stock_left", near)
	events := rdb.XLen(ctx, k.Outbox()).Val()

	if _, err := s.AdjustStock(ctx, "big", 3); !errors.Is(err, inventory.ErrInvalidState) {
		t.Fatalf("adding 3 to %s: err %v, want ErrInvalidState", near, err)
	}
	if h := rdb.HMGet(ctx, k.Hash(), "stock_total", "stock_left").Val(); h[0] != near || h[1] != near {
		t.Fatalf("a refused addition changed the stock to %v", h)
	}
	if n := rdb.XLen(ctx, k.Outbox()).Val(); n != events {
		t.Fatalf("a refused addition appended %d events", n-events)
	}
	it, err := s.AdjustStock(ctx, "big", 2)
	if err != nil {
		t.Fatalf("adding 2 up to the bound: %v", err)
	}
	if it.StockTotal != inventory.MaxStockTotal || it.StockLeft != inventory.MaxStockTotal {
		t.Fatalf("stock after adding up to the bound: total %d left %d, want %d", it.StockTotal, it.StockLeft, int64(inventory.MaxStockTotal))
	}
	if _, err := s.AdjustStock(ctx, "big", -1); err != nil {
		t.Fatalf("withdrawing at the bound: %v", err)
	}
}

// TestCluster runs the item, stock and purchase scripts on a local 3-master Redis Cluster:
// every key of a script shares the item's hash tag, so there is no CROSSSLOT, and an import's
// pipelines (UpsertMany) reach every master.
func TestCluster(t *testing.T) {
	rdb, keys := testenv.Cluster(t)
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{PurchaseLimit: limits.Policy{Rate: 100, Period: time.Second, Burst: 100}}))
	ord := orders.NewStore(rdb, keys)
	ctx := context.Background()
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, id := range ids {
		newItem(t, s, id, 20, 5)
	}
	var imported []inventory.Input
	for i := range 300 {
		imported = append(imported, inventory.Input{ID: "imp" + strconv.Itoa(i), Name: "n", PriceCents: 1, Stock: ptr(int64(i)), PerUserLimit: 1})
	}
	res, err := s.UpsertMany(ctx, imported)
	if err != nil {
		t.Fatalf("import on cluster: %v", err)
	}
	for i, r := range res {
		if r.Err != nil || !r.Created {
			t.Fatalf("import on cluster: row %d: %+v", i, r)
		}
		if it, err := s.Get(ctx, r.Item.ID); err != nil || it.StockTotal != int64(i) {
			t.Fatalf("import on cluster: %s: %+v %v", r.Item.ID, it, err)
		}
	}
	slots := map[int64]bool{}
	for _, id := range ids {
		slots[rdb.ClusterKeySlot(ctx, keys.Item(id).Hash()).Val()] = true
	}
	if len(slots) < 2 {
		t.Fatalf("test items all hash to one slot; pick other ids")
	}
	var wg sync.WaitGroup
	for i := range 80 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := ids[i%len(ids)]
			if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, UserID: "u" + strconv.Itoa(i%3), Quantity: 1, IdempotencyKey: "k" + strconv.Itoa(i)}); err != nil && !errors.Is(err, inventory.ErrLimitExceeded) {
				t.Errorf("purchase on cluster: %v", err)
			}
			if _, err := s.AdjustStock(ctx, id, 1); err != nil {
				t.Errorf("adjust on cluster: %v", err)
			}
		}()
	}
	wg.Wait()
	list, err := ord.List(ctx, "u0")
	if err != nil || len(list) == 0 {
		t.Fatalf("list orders on cluster: %d %v", len(list), err)
	}
	items, err := s.List(ctx)
	if err != nil || len(items) != len(ids)+len(imported) {
		t.Fatalf("list items on cluster: %d %v", len(items), err)
	}
	for _, it := range items[:len(ids)] { // a..h sort before imp...
		if it.StockLeft+it.Reserved != it.StockTotal || it.StockTotal != 30 {
			t.Fatalf("%s: left %d reserved %d total %d", it.ID, it.StockLeft, it.Reserved, it.StockTotal)
		}
	}
}

var _ = keyspace.ValidID

// TestQueued: Queued returns exactly the items with a waiting room, sorted, and follows changes
// made by this instance and by another one (through the snapshot), while goroutines ask it
// concurrently with the changes.
func TestQueued(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{SnapshotInterval: 20 * time.Millisecond}))
	other := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{SnapshotInterval: 20 * time.Millisecond}))
	room := &inventory.QueueSettings{AdmitPerSecond: 10, MaxActive: 10, PassTTLSeconds: 60}
	put := func(st *inventory.Store, id string, q *inventory.QueueSettings) {
		t.Helper()
		if _, _, err := st.Upsert(ctx, inventory.Input{ID: id, Name: id, PriceCents: 1, Stock: ptr(int64(5)), PerUserLimit: 1, Queue: q}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 30 {
		put(s, fmt.Sprintf("p%02d", i), nil)
	}
	for _, id := range []string{"q2", "q1", "q3"} {
		put(s, id, room)
	}
	queued := func(st *inventory.Store) string {
		items, err := st.Queued(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, it := range items {
			if it.Queue == nil {
				t.Fatalf("%s has no waiting room", it.ID)
			}
			ids = append(ids, it.ID)
		}
		return fmt.Sprint(ids)
	}
	if got := queued(s); got != "[q1 q2 q3]" {
		t.Fatalf("Queued = %s, want [q1 q2 q3]", got)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Queued(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	put(other, "q2", nil)   // another instance removes a waiting room
	put(other, "p07", room) // and gives one to a plain item
	put(s, "q4", room)      // this instance adds one
	deadline := time.Now().Add(10 * time.Second)
	for queued(s) != "[p07 q1 q3 q4]" {
		if time.Now().After(deadline) {
			t.Fatalf("Queued = %s after 10 s, want [p07 q1 q3 q4]", queued(s))
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
}

// TestSnapshotNeverGoesBack races this instance's own writes (each put into the snapshot at
// once) against refreshes that bring in another instance's (every millisecond), both built
// outside the snapshot's lock: a reader never sees an item go back to an older version, and
// once the writes stop the snapshot holds exactly Redis's items.
func TestSnapshotNeverGoesBack(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{SnapshotInterval: time.Millisecond}))
	other := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{SnapshotInterval: time.Hour}))
	const items = 20
	for i := range items {
		newItem(t, s, fmt.Sprintf("v%02d", i), 1, 1)
	}
	go s.RunSnapshot(ctx)
	var writers, readers sync.WaitGroup
	stop := make(chan struct{})
	for w := range 6 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			st := s
			if w%2 == 1 {
				st = other // seen by s only through its refresh
			}
			for n := range 150 {
				if _, err := st.AdjustStock(ctx, fmt.Sprintf("v%02d", (w*7+n)%items), 1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			seen := map[string]int64{}
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := range items {
					id := fmt.Sprintf("v%02d", i)
					it, err := s.Lookup(ctx, id)
					if err != nil {
						t.Error(err)
						return
					}
					if it.Version < seen[id] {
						t.Errorf("%s went back from version %d to %d", id, seen[id], it.Version)
						return
					}
					seen[id] = it.Version
				}
			}
		}()
	}
	writers.Wait()
	close(stop)
	readers.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for i := range items {
		id := fmt.Sprintf("v%02d", i)
		want, err := rdb.HGet(ctx, keys.Item(id).Hash(), "stock_total").Int64()
		if err != nil {
			t.Fatal(err)
		}
		for {
			it, err := s.Lookup(ctx, id)
			if err == nil && it.StockTotal == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the snapshot holds stock_total %d, Redis %d", id, it.StockTotal, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestReadsDoNotWaitForTheLoopsRefresh: while RunSnapshot runs, a read answers from the
// snapshot the loop left even when the loop's refresh is stuck (Redis in DEBUG SLEEP) and the
// snapshot is several intervals old: it returns while Redis still answers nobody.
func TestReadsDoNotWaitForTheLoopsRefresh(t *testing.T) {
	rdb, keys, addr := testenv.PrivateRedis(t, "--enable-debug-command", "yes")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{SnapshotInterval: 20 * time.Millisecond}))
	newItem(t, s, "a", 1, 1)
	if _, err := s.List(ctx); err != nil {
		t.Fatal(err)
	}
	go s.RunSnapshot(ctx)
	sleeper := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 30 * time.Second})
	defer sleeper.Close()
	slept := make(chan error, 1)
	go func() { slept <- sleeper.Do(ctx, "DEBUG", "SLEEP", "1.5").Err() }()
	probe := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer probe.Close()
	asleep := func() bool { return probe.Ping(ctx).Err() != nil }
	deadline := time.Now().Add(10 * time.Second)
	for !asleep() {
		if time.Now().After(deadline) {
			t.Fatal("Redis never went to sleep")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // a window: the snapshot is now five intervals old
	if _, err := s.Lookup(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if !asleep() {
		t.Fatal("the read returned only after Redis woke up: it waited for the loop's refresh")
	}
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
}

// TestAdmitRefusal: a purchase that Options.Admit refuses (the outbox over its bound) is
// ErrNotAdmitted and still Admit's own error, reads as Admit's message, and changes nothing,
// with an Idempotency-Key (none recorded) or without.
func TestAdmitRefusal(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	refusal := errors.New("the outbox is full; nothing was changed")
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{Admit: func() error { return refusal }}))
	newItem(t, s, "a", 5, 2)
	ctx := context.Background()
	for _, key := range []string{"", "k1"} {
		_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "a", UserID: "u", Quantity: 1, IdempotencyKey: key})
		if !errors.Is(err, inventory.ErrNotAdmitted) || !errors.Is(err, refusal) || err.Error() != refusal.Error() {
			t.Fatalf("key %q: purchase = %v, want ErrNotAdmitted wrapping %q", key, err, refusal)
		}
	}
	if it, err := s.Get(ctx, "a"); err != nil || it.StockLeft != 5 {
		t.Fatalf("after refusals: %+v %v, want 5 left", it, err)
	}
}

// TestPurchaseLimitWholeMilliseconds: the purchase limiter (gcra_step inside purchase.lua) with
// an emission interval of no whole ms (3 per second, burst 2): the burst passes, the next is
// refused with a wait of whole ms rounded up (never under the exact one), and the stored TAT
// keeps its fraction (no rounding that would add up over a burst).
func TestPurchaseLimitWholeMilliseconds(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	p := limits.Policy{Rate: 3, Period: time.Second, Burst: 2}
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{PurchaseLimit: p}))
	newItem(t, s, "w", 10, 10)
	start := rdb.Time(ctx).Val()
	for i, remaining := range []int{1, 0} {
		r, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "w", UserID: "u", Quantity: 1})
		if err != nil || r.Limit == nil || !r.Limit.Allowed || r.Limit.Remaining != remaining || r.Limit.Limit != 2 {
			t.Fatalf("purchase %d of the burst: %+v %v", i+1, r.Limit, err)
		}
		if r.Limit.Reset%time.Millisecond != 0 || r.Limit.Reset <= 0 || r.Limit.Reset > 667*time.Millisecond {
			t.Fatalf("purchase %d: reset %v, want whole ms up to 2 emission intervals", i+1, r.Limit.Reset)
		}
	}
	_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "w", UserID: "u", Quantity: 1})
	var pe *inventory.PurchaseError
	if !errors.As(err, &pe) || !errors.Is(err, limits.ErrRateLimited) || pe.Limit == nil || pe.Limit.Allowed {
		t.Fatalf("third purchase: %v, want rate limited", err)
	}
	elapsed := rdb.Time(ctx).Val().Sub(start)
	// The first TAT ran out one emission interval (333.33 ms) after the first purchase.
	if d := pe.Limit.RetryAfter; d%time.Millisecond != 0 || d > 334*time.Millisecond || d < 333*time.Millisecond-elapsed {
		t.Fatalf("retry after %v (%v after the first purchase), want whole ms up to 334ms", d, elapsed)
	}
	raw := rdb.HGet(ctx, keys.Item("w").PurchaseLimits(), "u").Val()
	if len(raw) != 8 {
		t.Fatalf("stored TAT %q: want the 8 bytes of a double", raw)
	}
	tat := math.Float64frombits(binary.LittleEndian.Uint64([]byte(raw)))
	if tat == math.Floor(tat) {
		t.Fatalf("stored TAT %v: want its fraction kept (first + 2 * 333.33 ms)", tat)
	}
	if ttl := rdb.PTTL(ctx, keys.Item("w").PurchaseLimits()).Val(); ttl <= 0 || ttl > 668*time.Millisecond {
		t.Fatalf("rate-limit hash TTL %v, want at most the time to refill (667 ms) + 1", ttl)
	}
}

// TestPurchaseLimitReadsTextTAT: a TAT an older version stored as text (Redis's "%.17g" of the
// number) still limits: one a minute ahead refuses the purchase for about that minute.
func TestPurchaseLimitReadsTextTAT(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{PurchaseLimit: limits.Policy{Rate: 1, Period: time.Second, Burst: 1}}))
	newItem(t, s, "old", 10, 10)
	ahead := float64(rdb.Time(ctx).Val().UnixMilli()) + 60000.5
	rdb.HSet(ctx, keys.Item("old").PurchaseLimits(), "u", strconv.FormatFloat(ahead, 'f', -1, 64))
	_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "old", UserID: "u", Quantity: 1})
	var pe *inventory.PurchaseError
	if !errors.As(err, &pe) || !errors.Is(err, limits.ErrRateLimited) || pe.Limit == nil || pe.Limit.RetryAfter < 50*time.Second {
		t.Fatalf("purchase under a text TAT a minute ahead: %v %+v, want rate limited for about a minute", err, pe)
	}
	// Another shopper, with no TAT, buys; the refused one wrote nothing.
	if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "old", UserID: "v", Quantity: 1}); err != nil {
		t.Fatal(err)
	}
	if got := rdb.HGet(ctx, keys.Item("old").PurchaseLimits(), "u").Val(); got != strconv.FormatFloat(ahead, 'f', -1, 64) {
		t.Fatalf("the refused shopper's TAT became %q", got)
	}
}

// TestReplayReturnsTheWholeOrder: a created order travels in the compact reply as its sequence
// number, but a replay (the same Idempotency-Key, a later call) returns the earlier order whole,
// not the retry's quantity. A re-sent call (the same call record) answers the recorded reply
// and makes nothing.
func TestReplayReturnsTheWholeOrder(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{PurchaseLimit: limits.Policy{Rate: 5, Period: time.Second, Burst: 5}}))
	newItem(t, s, "r", 10, 5)
	req := inventory.PurchaseRequest{ItemID: "r", UserID: "alice", Quantity: 2, IdempotencyKey: "k1"}
	made, err := s.Purchase(ctx, req)
	if err != nil || made.Replayed || made.Limit == nil || !made.Limit.Allowed {
		t.Fatalf("purchase: %+v %v", made, err)
	}
	stored, err := orders.Unpack(made.Order.ID, "r", rdb.HGet(ctx, keys.Item("r").Orders(), made.Order.ID).Val())
	if err != nil || made.Order != stored || made.Order.UserID != "alice" || made.Order.Quantity != 2 ||
		made.Order.PriceCents != 999 || made.Order.Status != orders.Reserved ||
		made.Order.ExpiresAt.Sub(made.Order.CreatedAt) != config.Defaults().ReservationTTL {
		t.Fatalf("created order %+v, the record holds %+v (%v)", made.Order, stored, err)
	}
	req.Quantity = 3 // a retry that says otherwise gets the order as it was made
	again, err := s.Purchase(ctx, req)
	if err != nil || !again.Replayed || again.Order != made.Order || again.Limit != nil {
		t.Fatalf("replay: %+v %v, want %+v replayed", again, err, made.Order)
	}

	// The same call sent twice: the second send answers the recorded reply.
	k := keys.Item("r")
	ks := []string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(), k.PurchaseLimits(), k.QueueTickets(),
		k.UserOrders(), k.Hash(), k.Idempotency("alice", "k1"), k.Hash() + ":call:resend"}
	args := []any{600000, 86400000, 5, 1000, 5, "r", "bob", 1, "", "", "alice", 1, "k1", "", time.Now().Add(time.Minute).UnixMilli()}
	first, err := rdb.EvalSha(ctx, inventory.PurchaseScript.Hash(), ks, args...).Slice()
	if err != nil {
		t.Fatal(err)
	}
	second, err := rdb.EvalSha(ctx, inventory.PurchaseScript.Hash(), ks, args...).Slice()
	if err != nil || !slices.Equal(first, second) || len(first) != 9 || first[0] != "C" ||
		first[4] != "R" || first[5] != made.Order.ID || first[6] != rdb.HGet(ctx, k.Orders(), made.Order.ID).Val() {
		t.Fatalf("re-sent call: %q then %q (%v)", first, second, err)
	}
	if it, _ := s.Get(ctx, "r"); it.StockLeft != 7 {
		t.Fatalf("stock left %d after orders of 2 and 1, want 7: the re-send made an order", it.StockLeft)
	}
}

// expiryOrders expands the item's entries of its shard's expiry index to the order ids they
// name; an order named twice fails the test.
func expiryOrders(t *testing.T, rdb redis.UniversalClient, k keyspace.Item) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, e := range rdb.ZRange(context.Background(), k.Expiry(), 0, -1).Val() {
		item, first, last, ok := keyspace.ExpiryEntry(e)
		if !ok {
			t.Fatalf("expiry entry %q is malformed", e)
		}
		if item != k.ID {
			continue
		}
		for seq := first; seq <= last; seq++ {
			id := keyspace.OrderID(item, strconv.FormatUint(seq, 10))
			if out[id] {
				t.Fatalf("order %s named twice in the expiry index", id)
			}
			out[id] = true
		}
	}
	return out
}

// userIndexOrders reads the item's user orders hash: order id -> user.
func userIndexOrders(t *testing.T, rdb redis.UniversalClient, k keyspace.Item) map[string]string {
	t.Helper()
	out := map[string]string{}
	for user, list := range rdb.HGetAll(context.Background(), k.UserOrders()).Val() {
		for _, seq := range strings.Split(list, ",") {
			out[keyspace.OrderID(k.ID, seq)] = user
		}
	}
	return out
}

// endSale creates in as a sale that ended at ends (in the past): created to end in the future,
// its end then moved back in Redis (as time passing would), and written again unchanged (an
// unchanged past ends_at is accepted), so the catalogue and the record learn it.
func endSale(t *testing.T, rdb redis.UniversalClient, keys keyspace.Space, s *inventory.Store, in inventory.Input, ends time.Time) {
	t.Helper()
	ctx := context.Background()
	future := time.Now().Add(time.Hour)
	in.EndsAt = &future
	if _, _, err := s.Upsert(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, keys.Item(in.ID).Hash(), "ends_at", ends.UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	in.EndsAt = &ends
	if _, _, err := s.Upsert(ctx, in); err != nil {
		t.Fatal(err)
	}
}

// TestPastEndRefused: an ends_at in the past is refused on create and when it changes, and
// writes nothing; an unchanged past ends_at is accepted (the admin may still fix a name).
func TestPastEndRefused(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	ctx := context.Background()
	past, long := time.Now().Add(-time.Minute), time.Now().Add(-time.Hour)
	in := inventory.Input{ID: "p", Name: "P", PriceCents: 1, Stock: ptr[int64](3), PerUserLimit: 1, StartsAt: &long, EndsAt: &past}
	if _, _, err := s.Upsert(ctx, in); !errors.Is(err, inventory.ErrInvalid) || !strings.Contains(err.Error(), "ends_at is in the past") {
		t.Fatalf("create ending in the past: %v", err)
	}
	if n := rdb.Exists(ctx, keys.Item("p").Hash()).Val(); n != 0 {
		t.Fatal("the refused create left the item")
	}
	if n := rdb.XLen(ctx, keys.Item("p").Outbox()).Val(); n != 0 {
		t.Fatalf("the refused create left %d outbox entries", n)
	}

	endSale(t, rdb, keys, s, inventory.Input{ID: "e", Name: "E", PriceCents: 1, Stock: ptr[int64](3), PerUserLimit: 1, StartsAt: &long}, past)
	renamed := inventory.Input{ID: "e", Name: "E2", PriceCents: 1, PerUserLimit: 1, StartsAt: &long, EndsAt: &past}
	if _, _, err := s.Upsert(ctx, renamed); err != nil {
		t.Fatalf("an unchanged past ends_at: %v", err)
	}
	earlier := past.Add(-time.Second)
	renamed.Name, renamed.EndsAt = "E3", &earlier
	if _, _, err := s.Upsert(ctx, renamed); !errors.Is(err, inventory.ErrInvalid) {
		t.Fatalf("moving a past end: %v", err)
	}
	if name := rdb.HGet(ctx, keys.Item("e").Hash(), "name").Val(); name != "E2" {
		t.Errorf("the refused update changed the name to %q", name)
	}
	later := time.Now().Add(time.Hour)
	renamed.EndsAt = &later
	if _, _, err := s.Upsert(ctx, renamed); err != nil {
		t.Fatalf("moving the end into the future: %v", err)
	}
}
