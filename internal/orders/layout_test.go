package orders_test

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// purchaseBatch is purchase.lua without the call record: the tests below need one script call
// of several attempts (the batcher forms them only under concurrency).
var purchaseBatch = exactlyonce.Bare("lib/gcra.lua", "lib/changed.lua", "inventory/purchase.lua")

// buyBatch buys one unit for each user in ONE purchase script call and returns the order ids
// in attempt order.
func (e *env) buyBatch(item string, ttl time.Duration, users ...string) []string {
	e.t.Helper()
	k := e.keys.Item(item)
	keys := []string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(), k.PurchaseLimits(), k.QueueTickets(), k.UserOrders()}
	args := []any{ttl.Milliseconds(), 86400000, 0, 0, 0, item}
	for _, u := range users {
		keys = append(keys, k.Hash())
		args = append(args, u, 1, "", "")
	}
	res, err := purchaseBatch.Run(context.Background(), e.rdb, keys, args...).Slice()
	// Four values per attempt ("C", the order's sequence number, the limiter's two figures),
	// then the batch's own string.
	if err != nil || len(res) != 4*len(users)+1 {
		e.t.Fatalf("batch of %d: %v %v", len(users), res, err)
	}
	ids := make([]string, len(users))
	for i := range users {
		seq, ok := res[4*i+1].(int64)
		if res[4*i] != "C" || !ok {
			e.t.Fatalf("attempt %d of the batch: %v", i+1, res[4*i:4*i+4])
		}
		ids[i] = item + "." + strconv.FormatInt(seq, 10)
	}
	// The purchase path indexes its orders after the script; here the relay's way does it,
	// from the batch's events.
	if err := orders.NewIndex(e.rdb, e.keys).Changed(context.Background(), testenv.StreamEvents(e.t, e.rdb, k.Outbox())); err != nil {
		e.t.Fatal(err)
	}
	return ids
}

// dueEntry moves an expiry entry and its orders' expires_at one second into the past, as if
// the batch's reservation time had run out.
func (e *env) dueEntry(item, entry string) {
	e.t.Helper()
	ctx := context.Background()
	k := e.keys.Item(item)
	now, err := e.rdb.Time(ctx).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	past := now.UnixMilli() - 1000
	_, first, last, ok := keyspace.ExpiryEntry(entry)
	if !ok {
		e.t.Fatalf("not an expiry entry: %q", entry)
	}
	for seq := first; seq <= last; seq++ {
		id := keyspace.OrderID(item, strconv.FormatUint(seq, 10))
		f := strings.Split(e.rdb.HGet(ctx, k.Orders(), id).Val(), "|")
		f[5] = strconv.FormatInt(past, 10)
		e.rdb.HSet(ctx, k.Orders(), id, strings.Join(f, "|"))
	}
	if err := e.rdb.ZAddXX(ctx, k.Expiry(), redis.Z{Score: float64(past), Member: entry}).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// TestBatchEntryExpiresOnlyReserved: a purchase batch's orders share one expiry entry. Pay and
// cancel leave it; when it falls due, expirers racing over it (under -race) expire exactly the
// orders still reserved, each once, hand exactly those to the Released hook, and take the
// entry off. Before it is due nothing happens, even with every other order settled.
func TestBatchEntryExpiresOnlyReserved(t *testing.T) {
	e := newEnv(t, time.Hour)
	ctx := context.Background()
	e.item("bx", 100, 100)
	users := []string{"u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8", "u9"}
	ids := e.buyBatch("bx", time.Hour, users...)
	k := e.keys.Item("bx")
	if got := e.rdb.ZRange(ctx, k.Expiry(), 0, -1).Val(); !slices.Equal(got, []string{"bx.1-9"}) {
		t.Fatalf("expiry index after one batch: %v, want [bx.1-9]", got)
	}
	for i, id := range ids {
		switch {
		case i < 3:
			must(t)(e.ord.Pay(ctx, users[i], id))
		case i < 6:
			must(t)(e.ord.Cancel(ctx, users[i], id))
		}
	}
	if got := e.rdb.ZRange(ctx, k.Expiry(), 0, -1).Val(); !slices.Equal(got, []string{"bx.1-9"}) {
		t.Fatalf("expiry index after pays and cancels: %v, want the batch entry left", got)
	}
	e.check("bx")
	// Not due: a sweep leaves everything.
	if r, err := e.ord.ExpireDue(ctx, "bx", 10); err != nil || r != (orders.ExpireResult{}) {
		t.Fatalf("sweep before the entry is due: %+v %v", r, err)
	}

	e.dueEntry("bx", "bx.1-9")
	released := map[string]int{} // order id -> times the expirers released it
	var relMu sync.Mutex
	e.ord.Hooks.Released = func(item string, ids []string) {
		relMu.Lock()
		defer relMu.Unlock()
		for _, id := range ids {
			released[id]++
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total orders.ExpireResult
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.ord.ExpireDue(ctx, "bx", 10)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total.Read += r.Read
			total.Examined += r.Examined
			total.Expired += r.Expired
			total.Units += r.Units
			mu.Unlock()
		}()
	}
	wg.Wait()
	// Each expirer that read the entry saw it taken off (by itself or another); the orders
	// expired once in all.
	if total.Expired != 3 || total.Units != 3 || total.Examined != total.Read || total.Read < 1 {
		t.Fatalf("expirers together: %+v, want 3 orders and 3 units expired once", total)
	}
	relMu.Lock()
	if want := map[string]int{ids[6]: 1, ids[7]: 1, ids[8]: 1}; !maps.Equal(released, want) {
		t.Fatalf("released %v, want %v", released, want)
	}
	relMu.Unlock()
	l := e.check("bx")
	for i, id := range ids {
		want := []orders.Status{orders.Paid, orders.Cancelled, orders.Expired}[i/3]
		if l.Orders[id].Status != want {
			t.Errorf("%s is %s, want %s", id, l.Orders[id].Status, want)
		}
	}
	if len(l.Entries) != 0 || l.Left != 97 || l.Paid != 3 || l.Reserved != 0 {
		t.Fatalf("after the expiry: entries %v, left %d paid %d reserved %d", l.Entries, l.Left, l.Paid, l.Reserved)
	}
}

// TestBatchEntryStaysWhileAnOrderIsOpen: an entry is taken off only when every order it names
// is settled. A reserved order whose own expiry is still ahead (only a restore rewrites one)
// keeps it, while its due orders expire; the entry goes once that order is settled.
func TestBatchEntryStaysWhileAnOrderIsOpen(t *testing.T) {
	e := newEnv(t, time.Hour)
	ctx := context.Background()
	e.item("by", 100, 100)
	ids := e.buyBatch("by", time.Hour, "a", "b", "c")
	e.dueEntry("by", "by.1-3")
	k := e.keys.Item("by")
	f := strings.Split(e.rdb.HGet(ctx, k.Orders(), ids[2]).Val(), "|")
	f[5] = strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	e.rdb.HSet(ctx, k.Orders(), ids[2], strings.Join(f, "|"))

	r, err := e.ord.ExpireDue(ctx, "by", 10)
	if err != nil || r != (orders.ExpireResult{Read: 1, Examined: 0, Expired: 2, Units: 2, Calls: 1}) {
		t.Fatalf("first pass: %+v %v, want 2 expired and the entry left", r, err)
	}
	if e.rdb.ZScore(ctx, k.Expiry(), "by.1-3").Err() != nil {
		t.Fatal("the entry went with an order of it still reserved")
	}
	must(t)(e.ord.Pay(ctx, "c", ids[2]))
	r, err = e.ord.ExpireDue(ctx, "by", 10)
	if err != nil || r != (orders.ExpireResult{Read: 1, Examined: 1, Calls: 1}) {
		t.Fatalf("pass after the last order settled: %+v %v, want the entry taken off", r, err)
	}
	if l := e.check("by"); len(l.Entries) != 0 || l.Paid != 1 || l.Left != 99 {
		t.Fatalf("after: entries %v, paid %d, left %d", l.Entries, l.Paid, l.Left)
	}
}

// TestExpireSplitsCallsAtTheBound: one item's due entries naming more orders than the pass's
// batch go out in several script calls, each naming at most the batch (or one whole purchase
// batch's entry, when that is longer), never more than MaxExpireBatch.
func TestExpireSplitsCallsAtTheBound(t *testing.T) {
	e := newEnv(t, time.Hour)
	ctx := context.Background()
	e.seedDue("big", 2500) // 100 entries of 25 orders
	r, err := e.ord.ExpireDue(ctx, "big", orders.MaxExpireBatch)
	if err != nil || r != (orders.ExpireResult{Read: 100, Examined: 100, Expired: 2500, Units: 2500, Calls: 3}) {
		t.Fatalf("batch 1000: %+v %v, want 2,500 orders in 3 calls", r, err)
	}
	e.check("big")
	e.seedDue("mid", 500) // 20 entries of 25 orders
	r, err = e.ord.ExpireDue(ctx, "mid", 100)
	if err != nil || r != (orders.ExpireResult{Read: 20, Examined: 20, Expired: 500, Units: 500, Calls: 5}) {
		t.Fatalf("batch 100: %+v %v, want 500 orders in 5 calls of 100", r, err)
	}
	e.check("mid")
	// An entry longer than the batch goes whole: calls of one entry each.
	e.item("long", 1000, 1000)
	users := make([]string, 200)
	for i := range users {
		users[i] = "u" + strconv.Itoa(i)
	}
	for range 2 {
		e.dueEntry("long", e.entryOf("long", e.buyBatch("long", time.Hour, users...)[0]))
	}
	r, err = e.ord.ExpireDue(ctx, "long", 10)
	if err != nil || r != (orders.ExpireResult{Read: 2, Examined: 2, Expired: 400, Units: 400, Calls: 2}) {
		t.Fatalf("batch 10 over entries of 200: %+v %v, want 2 calls of 200", r, err)
	}
	e.check("long")
}

// entryOf is the expiry entry naming order id.
func (e *env) entryOf(item, id string) string {
	e.t.Helper()
	entry := e.ledger(item).Expiry[id]
	if entry == "" {
		e.t.Fatalf("no expiry entry names %s", id)
	}
	return entry
}

// TestListAfterIndexChange: GET /api/orders's List finds a user's orders through the user's
// order index: every order of the caller (from batches shared with other
// users, several per item, over items of several shards, in every status) newest first, and
// none of anyone else's.
func TestListAfterIndexChange(t *testing.T) {
	e := newEnv(t, time.Hour)
	ctx := context.Background()
	items := []string{"la", "lb", "lc", "ld", "le"}
	shards := map[int]bool{}
	for _, it := range items {
		e.item(it, 100, 100)
		shards[keyspace.ShardOf(it)] = true
	}
	if len(shards) < 2 {
		t.Fatalf("items %v are all of one shard", items)
	}
	var mine []string
	for round := range 3 {
		for _, it := range items {
			ids := e.buyBatch(it, time.Hour, "bob", "alice", "carol", "alice")
			mine = append(mine, ids[1], ids[3])
			if round == 1 {
				must(t)(e.ord.Pay(ctx, "alice", ids[1]))
				must(t)(e.ord.Cancel(ctx, "alice", ids[3]))
			}
		}
		mine = append(mine, e.buy(items[round], "alice", 1).ID)
	}
	list, err := e.ord.List(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, o := range list {
		got = append(got, o.ID)
		if o.UserID != "alice" {
			t.Errorf("listed %s of %s", o.ID, o.UserID)
		}
		if i > 0 && list[i-1].CreatedAt.Before(o.CreatedAt) {
			t.Errorf("%s (%v) listed before the newer %s (%v)", list[i-1].ID, list[i-1].CreatedAt, o.ID, o.CreatedAt)
		}
	}
	slices.Sort(got)
	slices.Sort(mine)
	if !slices.Equal(got, mine) {
		t.Fatalf("listed %v,\nwant %v", got, mine)
	}
	statuses := map[orders.Status]int{}
	for _, o := range list {
		statuses[o.Status]++
	}
	if statuses[orders.Paid] != 5 || statuses[orders.Cancelled] != 5 {
		t.Errorf("statuses listed: %v", statuses)
	}
	// Within one millisecond of one item, the later sequence number first.
	for i := 1; i < len(list); i++ {
		a, b := list[i-1], list[i]
		if a.ItemID == b.ItemID && a.CreatedAt.Equal(b.CreatedAt) && seqOf(a.ID) < seqOf(b.ID) {
			t.Errorf("%s listed before %s", a.ID, b.ID)
		}
	}
	if l, err := e.ord.List(ctx, "nobody"); err != nil || len(l) != 0 {
		t.Fatalf("a user without orders: %v %v", l, err)
	}
	for _, it := range items {
		e.check(it)
	}
}

func seqOf(id string) uint64 {
	_, s, _ := strings.Cut(id, ".")
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// TestExpireScriptRefusesBadEntries: expire.lua refuses, before any write, an entry that is not
// one of the item's (another item's, a malformed or reversed range, a range longer than a
// purchase batch) and a call naming more than 1000 orders.
func TestExpireScriptRefusesBadEntries(t *testing.T) {
	e := newEnv(t, time.Hour)
	ctx := context.Background()
	e.item("bz", 100, 100)
	e.dueEntry("bz", e.entryOf("bz", e.buyBatch("bz", time.Hour, "a", "b")[0]))
	before := e.check("bz")
	long := []string{"bz.1-256", "bz.257-512", "bz.513-768", "bz.769-1024"}
	for _, entries := range [][]string{
		{"other.1"}, {"bz.1-2", "other.1-2"}, {"bz.2-1"}, {"bz.1-"}, {"bz."}, {"bz.1-257"},
		{"bz.1-2", "bz.x"}, {"bzz.1"}, long,
	} {
		if r, err := e.ord.ExpireEntries(ctx, "bz", entries...); err == nil {
			t.Errorf("entries %v: accepted (%+v)", entries, r)
		}
	}
	if after := e.check("bz"); !reflect.DeepEqual(before, after) {
		t.Fatalf("refused calls wrote:\nbefore %+v\nafter  %+v", before, after)
	}
	if r, err := e.ord.ExpireEntries(ctx, "bz", "bz.1-2"); err != nil || r.Expired != 2 {
		t.Fatalf("the good entry: %+v %v", r, err)
	}
}
