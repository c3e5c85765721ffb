package reconcile_test

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/ranking"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// state is everything of one item that restore rebuilds. The expiry index is compared by the
// reserved orders it names (restore writes one entry per order where purchases wrote one per
// batch), the user index by each user's order list.
type state struct {
	hash                 map[string]string
	orders, held, paidBy map[string]string
	expiry               map[string]float64 // reserved order id -> due ms of the entry naming it
	users                map[string]string  // user -> order list
}

func (e *env) dump(item string, users []string) state {
	k := e.keys.Item(item)
	s := state{
		hash:   e.rdb.HGetAll(e.ctx, k.Hash()).Val(),
		orders: e.rdb.HGetAll(e.ctx, k.Orders()).Val(),
		held:   e.rdb.HGetAll(e.ctx, k.Held()).Val(),
		paidBy: e.rdb.HGetAll(e.ctx, k.PaidBy()).Val(),
		expiry: map[string]float64{},
		users:  map[string]string{},
	}
	for _, z := range e.rdb.ZRangeWithScores(e.ctx, k.Expiry(), 0, -1).Val() {
		it, first, last, ok := keyspace.ExpiryEntry(z.Member.(string))
		if !ok {
			e.t.Errorf("malformed expiry entry %v", z.Member)
			continue
		}
		for seq := first; it == item && seq <= last; seq++ {
			id := keyspace.OrderID(item, strconv.FormatUint(seq, 10))
			if _, twice := s.expiry[id]; twice {
				e.t.Errorf("%s: order %s named by two expiry entries", item, id)
			}
			if strings.Contains(s.orders[id], "|reserved|") {
				s.expiry[id] = z.Score
			}
		}
	}
	lists := e.rdb.HGetAll(e.ctx, k.UserOrders()).Val()
	for _, u := range users {
		if lists[u] != "" {
			s.users[u] = lists[u]
		}
	}
	return s
}

func (e *env) sameState(item string, before, after state) {
	e.t.Helper()
	for _, f := range []string{"stock_total", "stock_left", "reserved", "paid", "name", "category", "price_cents", "per_user_limit", "starts_at", "ends_at", "seq"} {
		if before.hash[f] != after.hash[f] {
			e.t.Errorf("%s %s: %q before, %q restored", item, f, before.hash[f], after.hash[f])
		}
	}
	for what, pair := range map[string][2]map[string]string{"orders": {before.orders, after.orders},
		"held": {before.held, after.held}, "paidby": {before.paidBy, after.paidBy}} {
		if !maps.Equal(pair[0], pair[1]) {
			e.t.Errorf("%s %s differ:\nbefore %v\nafter  %v", item, what, pair[0], pair[1])
		}
	}
	if !maps.Equal(before.expiry, after.expiry) {
		e.t.Errorf("%s expiry: %v before, %v restored", item, before.expiry, after.expiry)
	}
	if !maps.Equal(before.users, after.users) {
		e.t.Errorf("%s user indexes differ:\nbefore %v\nafter  %v", item, before.users, after.users)
	}
}

// Sell, reconcile, lose Redis (FLUSHDB), restore --all from Postgres, keep selling: the restore
// runs (its fence passes the runs before), rebuilds what was lost (items, orders with their
// expiry, allowances, indexes, boards), and the sale goes on with fresh order ids to exactly
// the stock; batch then finds no drift.
func TestRestoreAfterFlush(t *testing.T) {
	rdb, keys, _ := testenv.PrivateRedis(t)
	e := newEnvOn(t, rdb, keys)
	rank := ranking.NewStore(rdb, keys, options.Ranking(ranking.Options{}))
	e.ord.Hooks.PaidChanged = rank.PaidChanged
	items := map[string]int64{"A": 60, "B": 40} // stock; per-user limit 4
	for id, stock := range items {
		e.item(id, stock, 4)
	}
	var users []string
	for i := 0; i < 20; i++ {
		users = append(users, "u"+strconv.Itoa(i))
	}
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for _, id := range []string{"A", "B"} {
				res, err := e.inv.Purchase(e.ctx, inventory.PurchaseRequest{ItemID: id, UserID: u, Quantity: 1 + rng.Int64N(2)})
				if err != nil {
					continue
				}
				switch rng.IntN(4) {
				case 0, 1:
					if _, err := e.ord.Pay(e.ctx, u, res.Order.ID); err == nil {
						if _, err := rank.Rate(e.ctx, id, "c", u, 1+rng.IntN(5)); err != nil {
							t.Errorf("rate: %v", err)
						}
					}
				case 2:
					_, _ = e.ord.Cancel(e.ctx, u, res.Order.ID)
				}
			}
		}()
	}
	wg.Wait()
	// One reservation per item lapses and the expirer takes it: every status is in the record.
	short := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{ReservationTTL: time.Millisecond}))
	users = append(users, "late")
	for id := range items {
		res, err := short.Purchase(e.ctx, inventory.PurchaseRequest{ItemID: id, UserID: "late", Quantity: 1})
		if err != nil {
			t.Fatal(err)
		}
		waitPast(t, res.Order.ExpiresAt)
	}
	exp := orders.NewExpirer(e.ord, 0, 100)
	if n, err := exp.Sweep(e.ctx); err != nil || n != int64(len(items)) {
		t.Fatalf("expired %d of the %d lapsed reservations: %v", n, len(items), err)
	}
	e.drain()
	rec := e.reconciler(reconcile.Options{Ranking: rank, ReservationTTL: 5 * time.Minute, QuietFor: 50 * time.Millisecond})
	var lastFence int64
	for range 2 {
		rep, err := rec.Batch(e.ctx, reconcile.BatchOptions{})
		if err != nil || !rep.Clean() {
			t.Fatalf("batch before the loss: %v %+v", err, rep)
		}
		lastFence = rep.FencingToken
	}
	before := map[string]state{}
	for id := range items {
		before[id] = e.dump(id, users)
	}
	listed := map[string][]orders.Order{} // GET /api/orders of each user
	for _, u := range users {
		l, err := e.ord.List(e.ctx, u)
		if err != nil || len(l) == 0 {
			t.Fatalf("orders of %s before the loss: %v %v", u, l, err)
		}
		listed[u] = l
	}
	topBefore, _ := rank.TopRated(e.ctx, "", 10)
	soldBefore, _ := rank.BestSellers(e.ctx, 10)

	if err := rdb.FlushDB(e.ctx).Err(); err != nil { // a private server: losing it is the test
		t.Fatal(err)
	}
	// The reconciler's reservation TTL (5m) is not the api's (1h): restored reservations must
	// keep their own expiry all the same.
	res, err := rec.Restore(e.ctx, reconcile.RestoreOptions{All: true})
	if err != nil {
		t.Fatalf("first restore after the loss: %v", err)
	}
	if len(res.Restored) != 2 || len(res.Refused) != 0 || res.FencingToken <= lastFence {
		t.Fatalf("restore: %+v (fencing number must pass %d)", res, lastFence)
	}
	maxSeq := map[string]int64{}
	for id := range items {
		after := e.dump(id, users)
		e.sameState(id, before[id], after)
		h := after.hash
		if num(h["stock_left"])+num(h["reserved"])+num(h["paid"]) != num(h["stock_total"]) {
			t.Errorf("%s restored: stock_left %s + reserved %s + paid %s != stock_total %s",
				id, h["stock_left"], h["reserved"], h["paid"], h["stock_total"])
		}
		for oid := range before[id].orders {
			maxSeq[id] = max(maxSeq[id], seqOf(oid))
		}
	}
	// Each user lists the same orders, newest first, from the rebuilt user index.
	for _, u := range users {
		l, err := e.ord.List(e.ctx, u)
		if err != nil || !slices.Equal(l, listed[u]) {
			t.Errorf("orders of %s after the restore: %v %v,\nbefore the loss %v", u, l, err, listed[u])
		}
	}
	topAfter, _ := rank.TopRated(e.ctx, "", 10)
	soldAfter, _ := rank.BestSellers(e.ctx, 10)
	if len(topBefore) == 0 || !slicesEqual(topBefore, topAfter) || !slicesEqual(soldBefore, soldAfter) {
		t.Fatalf("boards: top %v -> %v, sold %v -> %v", topBefore, topAfter, soldBefore, soldAfter)
	}

	// Keep selling until everything is gone, with new buyers racing.
	var created atomic.Int64
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := "n" + strconv.Itoa(i)
			for _, id := range []string{"A", "B", "A", "B"} {
				if _, err := e.inv.Purchase(e.ctx, inventory.PurchaseRequest{ItemID: id, UserID: u, Quantity: 1}); err == nil {
					created.Add(1)
				} else if !errors.Is(err, inventory.ErrSoldOut) && !errors.Is(err, inventory.ErrLimitExceeded) {
					t.Errorf("purchase after restore: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	var newOrders int64
	for id, stock := range items {
		after := e.dump(id, nil)
		var units int64
		perUser := map[string]int64{}
		for _, packed := range after.orders {
			f := strings.Split(packed, "|")
			q, _ := strconv.ParseInt(f[1], 10, 64)
			if f[3] == "reserved" || f[3] == "paid" {
				units += q
				perUser[f[0]] += q
			}
		}
		if units != stock || after.hash["stock_left"] != "0" {
			t.Errorf("%s: %d units out of %d, stock_left %s: oversold or lost", id, units, stock, after.hash["stock_left"])
		}
		for u, q := range perUser {
			if q > 4 {
				t.Errorf("%s: %s holds %d > limit 4", id, u, q)
			}
		}
		newOrders += int64(len(after.orders) - len(before[id].orders))
		// New ids never collide with restored ones: every old order is intact, every new one
		// numbered after them.
		for oid, packed := range before[id].orders {
			if after.orders[oid] != packed {
				t.Errorf("%s: order %s was %q, is %q after selling again", id, oid, packed, after.orders[oid])
			}
		}
		for oid := range after.orders {
			if _, old := before[id].orders[oid]; !old && seqOf(oid) <= maxSeq[id] {
				t.Errorf("%s: new order %s not numbered after the restored ones (max seq %d)", id, oid, maxSeq[id])
			}
		}
	}
	if newOrders != created.Load() {
		t.Fatalf("%d new orders in Redis, %d purchases succeeded (an id was reused)", newOrders, created.Load())
	}
	e.drain()
	rep, err := rec.Batch(e.ctx, reconcile.BatchOptions{})
	if err != nil || !rep.Clean() {
		t.Fatalf("batch after restore and selling: %v drift %q unverified %+v", err, driftKeys(rep.Drift), rep.Unverified)
	}
}

func num(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// seqOf is the sequence number in an order id ("<item>.<seq>").
func seqOf(id string) int64 {
	_, seq, _ := strings.Cut(id, ".")
	return num(seq)
}

// waitPast waits until the wall clock is past at (a reservation's expiry): a condition with a
// deadline, not a fixed sleep.
func waitPast(t *testing.T, at time.Time) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !time.Now().After(at); {
		if time.Now().After(deadline) {
			t.Fatalf("the clock did not pass %v", at)
		}
		time.Sleep(time.Millisecond)
	}
}

func slicesEqual(a, b []ranking.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ItemID != b[i].ItemID || a[i].Score != b[i].Score {
			return false
		}
	}
	return true
}

// Restore refuses an item being sold (unless forced) and one the record does not have.
func TestRestoreRefusesLiveItem(t *testing.T) {
	e := newEnv(t)
	e.item("A", 1000000, 1000000)
	e.buy("A", "alice", 1)
	e.drain()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				if _, ok := e.tryBuy("A", "bob", 1); !ok {
					return
				}
			}
		}
	}()
	rec := e.reconciler(reconcile.Options{QuietFor: 100 * time.Millisecond, ReservationTTL: time.Hour})
	res, err := rec.Restore(e.ctx, reconcile.RestoreOptions{Items: []string{"A", "nope"}})
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Restored) != 0 || len(res.Refused) != 2 ||
		!strings.Contains(res.Refused[0].Reason, "live") || !strings.Contains(res.Refused[1].Reason, "not in Postgres") {
		t.Fatalf("restore while selling: %+v", res)
	}
	t.Logf("refused: %+v", res.Refused)

	// Forced, after the pipeline drained: Redis is rebuilt to what it already was.
	e.drain()
	before := e.dump("A", []string{"alice", "bob"})
	res, err = rec.Restore(e.ctx, reconcile.RestoreOptions{Items: []string{"A"}, Force: true})
	if err != nil || len(res.Restored) != 1 {
		t.Fatalf("forced restore: %+v %v", res, err)
	}
	e.sameState("A", before, e.dump("A", []string{"alice", "bob"}))
}

// TestRestoreRefusesItemSoldAfterItsCheck: a purchase lands between restore's idle check and
// its first write. The restore must refuse the item and write nothing, or it would delete a
// live order whose event still reaches Postgres, and sell its units again; once the item is
// quiet the restore goes through.
func TestRestoreRefusesItemSoldAfterItsCheck(t *testing.T) {
	e := newEnv(t)
	e.item("A", 4, 4)
	e.buy("A", "alice", 2)
	e.drain()
	var late orders.Order
	var sold atomic.Bool
	opt := reconcile.Options{QuietFor: 10 * time.Millisecond, ReservationTTL: time.Hour}
	reconcile.SetBeforeBegin(&opt, func(ctx context.Context, item string) {
		if sold.CompareAndSwap(false, true) {
			late = e.buy(item, "bob", 2) // the item sells after it was found idle
		}
	})
	rec := e.reconciler(opt)
	res, err := rec.Restore(e.ctx, reconcile.RestoreOptions{Items: []string{"A"}})
	if err != nil {
		t.Fatal(err)
	}
	if !sold.Load() || len(res.Restored) != 0 || len(res.Refused) != 1 ||
		!strings.Contains(res.Refused[0].Reason, "changed after its idle check") {
		t.Fatalf("restore of an item sold after its check: %+v", res)
	}
	if _, err := e.ord.Get(e.ctx, "bob", late.ID); err != nil {
		t.Fatalf("the late order is gone from Redis: %v", err)
	}
	it, err := e.inv.Get(e.ctx, "A")
	if err != nil || it.StockLeft != 0 || it.Reserved != 4 {
		t.Fatalf("item A after the refused restore: %+v %v (want 0 left, 4 reserved)", it, err)
	}
	if _, err := e.inv.Purchase(e.ctx, inventory.PurchaseRequest{ItemID: "A", UserID: "carol", Quantity: 1}); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("a fifth unit sold: %v", err)
	}

	// The record ends with the same 4 units, and batch finds Redis and Postgres agreeing.
	e.drain()
	if units := e.heldUnits("A"); units != 4 {
		t.Fatalf("the record holds %d units of a stock of 4", units)
	}
	if rep, err := rec.Batch(e.ctx, reconcile.BatchOptions{}); err != nil || !rep.Clean() {
		t.Fatalf("batch after the refused restore: %v %+v", err, rep)
	}
	// Quiet now: the restore goes through and rebuilds exactly what is live.
	users := []string{"alice", "bob", "carol"}
	before := e.dump("A", users)
	res, err = rec.Restore(e.ctx, reconcile.RestoreOptions{Items: []string{"A"}})
	if err != nil || len(res.Restored) != 1 {
		t.Fatalf("restore of the quiet item: %+v %v", res, err)
	}
	e.sameState("A", before, e.dump("A", users))
}

// heldUnits is the units the record holds reserved or paid for an item.
func (e *env) heldUnits(item string) int64 {
	e.t.Helper()
	var n int64
	if err := e.db.QueryRow(e.ctx, `SELECT coalesce(sum(quantity), 0) FROM orders
		WHERE item_id = $1 AND status IN ('reserved', 'paid')`, item).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// TestFencingSurvivesRedisLoss: the lock's fencing counter lives in Redis. After Redis lost
// it (FLUSHDB), a job's number starts above the largest Postgres recorded, so restore and
// batch run the first time instead of being refused as older than the runs before the loss;
// and a runner still holding a number from before the loss stays refused.
func TestFencingSurvivesRedisLoss(t *testing.T) {
	rdb, keys, _ := testenv.PrivateRedis(t)
	e := newEnvOn(t, rdb, keys)
	e.item("A", 10, 4)
	e.buy("A", "alice", 1)
	e.drain()
	rec := e.reconciler(reconcile.Options{QuietFor: 10 * time.Millisecond, ReservationTTL: time.Hour})
	// Runs of both kinds before the loss; the record remembers their numbers.
	for range 3 {
		if rep, err := rec.Batch(e.ctx, reconcile.BatchOptions{}); err != nil || !rep.Clean() {
			t.Fatalf("batch before the loss: %v %+v", err, rep)
		}
	}
	res, err := rec.Restore(e.ctx, reconcile.RestoreOptions{Items: []string{"A"}})
	if err != nil || len(res.Restored) != 1 {
		t.Fatalf("restore before the loss: %+v %v", res, err)
	}
	last := res.FencingToken

	if err := rdb.FlushDB(e.ctx).Err(); err != nil { // a private server: losing it is the test
		t.Fatal(err)
	}
	res, err = rec.Restore(e.ctx, reconcile.RestoreOptions{All: true})
	if err != nil || len(res.Restored) != 1 || len(res.Refused) != 0 {
		t.Fatalf("first restore after Redis lost its data: %+v %v", res, err)
	}
	if res.FencingToken <= last {
		t.Fatalf("restore's fencing number %d after %d: it must pass the runs before the loss", res.FencingToken, last)
	}
	rep, err := rec.Batch(e.ctx, reconcile.BatchOptions{})
	if err != nil || !rep.Clean() || rep.FencingToken <= res.FencingToken {
		t.Fatalf("first batch after the restore: %v %+v", err, rep)
	}
	if err := e.rec.RaiseFence(e.ctx, reconcile.LockName, last); !errors.Is(err, reconcile.ErrFenced) {
		t.Fatalf("a runner from before the loss wrote: %v; want ErrFenced", err)
	}
}

// TestRestoredReservationKeepsItsExpiry: a reservation restored from the record keeps the
// expiry the purchase gave it (order.reserved carries it), even when the reconciler runs with
// another FLASHSALE_RESERVATION_TTL than the api that sold it.
func TestRestoredReservationKeepsItsExpiry(t *testing.T) {
	rdb, keys, _ := testenv.PrivateRedis(t)
	e := newEnvOn(t, rdb, keys) // the api's reservations last an hour
	e.item("A", 10, 4)
	o := e.buy("A", "alice", 2)
	e.drain()
	if err := rdb.FlushDB(e.ctx).Err(); err != nil { // a private server: losing it is the test
		t.Fatal(err)
	}
	rec := e.reconciler(reconcile.Options{QuietFor: 10 * time.Millisecond, ReservationTTL: 5 * time.Minute})
	if res, err := rec.Restore(e.ctx, reconcile.RestoreOptions{All: true}); err != nil || len(res.Restored) != 1 {
		t.Fatalf("restore: %+v %v", res, err)
	}
	got, err := e.ord.Get(e.ctx, "alice", o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.ExpiresAt.Equal(o.ExpiresAt) || got.Status != orders.Reserved {
		t.Fatalf("restored %+v, want expires_at %v as sold", got, o.ExpiresAt)
	}
	due, _ := rdb.ZScore(e.ctx, keys.Item("A").Expiry(), o.ID).Result()
	if int64(due) != o.ExpiresAt.UnixMilli() {
		t.Fatalf("expiry index says %v, want %v", int64(due), o.ExpiresAt.UnixMilli())
	}
}

// TestRestoredPastReservationExpiresOnce: a reservation whose own expiry passed while Redis was
// lost is restored as it was (reserved, its units counted, its own expiry, now past) and the
// normal path expires it: several expirers racing return its units exactly once, the record
// gets one order.expired, and batch then finds no drift.
func TestRestoredPastReservationExpiresOnce(t *testing.T) {
	rdb, keys, _ := testenv.PrivateRedis(t)
	e := newEnvOn(t, rdb, keys)
	e.item("A", 10, 4)
	short := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{ReservationTTL: time.Millisecond}))
	res, err := short.Purchase(e.ctx, inventory.PurchaseRequest{ItemID: "A", UserID: "alice", Quantity: 2})
	if err != nil {
		t.Fatal(err)
	}
	lapsed := res.Order
	kept := e.buy("A", "bob", 1) // an hour to pay: stays reserved
	// No expirer runs: the record holds both reserved when Redis (a private server) is lost.
	e.drain()
	if err := rdb.FlushDB(e.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	waitPast(t, lapsed.ExpiresAt)

	rec := e.reconciler(reconcile.Options{QuietFor: 10 * time.Millisecond, ReservationTTL: time.Hour})
	if r, err := rec.Restore(e.ctx, reconcile.RestoreOptions{All: true}); err != nil || len(r.Restored) != 1 ||
		r.Restored[0].Reserved != 3 || r.Restored[0].StockLeft != 7 {
		t.Fatalf("restore: %+v %v", r, err)
	}
	got, err := e.ord.Get(e.ctx, "alice", lapsed.ID)
	if err != nil || got.Status != orders.Reserved || !got.ExpiresAt.Equal(lapsed.ExpiresAt) {
		t.Fatalf("restored %+v %v, want reserved with its own expiry %v", got, err, lapsed.ExpiresAt)
	}

	// The normal path: expirers (one per api instance) sweep at once.
	exp := orders.NewExpirer(e.ord, 0, 100)
	var wg sync.WaitGroup
	var expired atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				n, err := exp.Sweep(e.ctx)
				if err != nil {
					t.Errorf("sweep: %v", err)
				}
				expired.Add(n)
			}
		}()
	}
	wg.Wait()
	if expired.Load() != 1 {
		t.Fatalf("%d orders expired, want exactly the lapsed one", expired.Load())
	}
	it, err := e.inv.Get(e.ctx, "A")
	if err != nil || it.StockLeft != 9 || it.Reserved != 1 || it.StockLeft+it.Reserved+it.Paid != it.StockTotal {
		t.Fatalf("item after expiry: %+v %v (want 9 left, 1 reserved: the 2 units back once)", it, err)
	}
	if got, _ := e.ord.Get(e.ctx, "alice", lapsed.ID); got.Status != orders.Expired {
		t.Fatalf("lapsed order is %s", got.Status)
	}
	if got, _ := e.ord.Get(e.ctx, "bob", kept.ID); got.Status != orders.Reserved || !got.ExpiresAt.Equal(kept.ExpiresAt) {
		t.Fatalf("kept order: %+v", got)
	}
	if held := rdb.HGet(e.ctx, keys.Item("A").Held(), "alice").Val(); held != "" && held != "0" {
		t.Fatalf("alice still holds %s units of her allowance", held)
	}

	e.drain()
	var returned int
	if err := e.db.QueryRow(e.ctx, `SELECT count(*) FROM stock_movements WHERE order_id = $1 AND kind = 'returned'`,
		lapsed.ID).Scan(&returned); err != nil || returned != 1 {
		t.Fatalf("the record returned the lapsed order's stock %d times (%v), want once", returned, err)
	}
	if units := e.heldUnits("A"); units != 1 {
		t.Fatalf("the record holds %d units, want bob's 1", units)
	}
	if rep, err := rec.Batch(e.ctx, reconcile.BatchOptions{}); err != nil || !rep.Clean() {
		t.Fatalf("batch after the expiry: %v drift %v", err, rep)
	}
}

// TestRestoreKeepsItemCreatedDuringIt: an admin upsert between restore_begin.lua (the item hash
// deleted) and restore_finish.lua would create the item anew at seq 0, its order ids colliding
// with the restored ones. It is refused while the item is rebuilt, so a live order survives and
// the restore rebuilds exactly what was there.
func TestRestoreKeepsItemCreatedDuringIt(t *testing.T) {
	e := newEnv(t)
	e.item("A", 4, 4)
	alice := e.buy("A", "alice", 2)
	e.drain()
	users := []string{"alice", "bob"}
	before := e.dump("A", users)

	var late orders.Order
	var created, sold bool
	var upsertErr error
	opt := reconcile.Options{QuietFor: 10 * time.Millisecond, ReservationTTL: time.Hour}
	reconcile.SetAfterBegin(&opt, func(ctx context.Context, item string) {
		stock := int64(4)
		_, created, upsertErr = e.inv.Upsert(ctx, inventory.Input{ID: item, Name: "item " + item,
			Category: "c", PriceCents: 250, Stock: &stock, PerUserLimit: 4})
		if upsertErr == nil {
			late, sold = e.tryBuy(item, "bob", 2)
		}
	})
	rec := e.reconciler(opt)
	res, err := rec.Restore(e.ctx, reconcile.RestoreOptions{Items: []string{"A"}})
	if err != nil {
		t.Fatal(err)
	}
	if sold {
		// The shopper was answered 201: the order must be in Redis as sold.
		got, err := e.ord.Get(e.ctx, "bob", late.ID)
		if err != nil || got.UserID != "bob" || got.Quantity != 2 {
			t.Fatalf("bob's order %s, sold while the item was restored (created %v), is gone after the restore: %+v %v",
				late.ID, created, got, err)
		}
	}
	if upsertErr == nil {
		t.Fatalf("an upsert created item A while a restore rebuilt it (created %v, sold %v); restore: %+v", created, sold, res)
	}
	if !errors.Is(upsertErr, inventory.ErrRestoring) {
		t.Fatalf("upsert during the restore: %v, want inventory.ErrRestoring", upsertErr)
	}
	if len(res.Restored) != 1 {
		t.Fatalf("restore: %+v", res)
	}
	e.sameState("A", before, e.dump("A", users))
	if got, err := e.ord.Get(e.ctx, "alice", alice.ID); err != nil || got.Quantity != 2 {
		t.Fatalf("alice's order after the restore: %+v %v", got, err)
	}
	// Once restored, the item is updated as usual.
	stock := int64(4)
	if _, created, err := e.inv.Upsert(e.ctx, inventory.Input{ID: "A", Name: "renamed", Category: "c",
		PriceCents: 250, Stock: &stock, PerUserLimit: 4}); err != nil || created {
		t.Fatalf("upsert after the restore: created %v, %v", created, err)
	}
}
