package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// Retention in these tests is an hour and the record's clock is moved back instead of waiting:
// age makes an order the record holds final a candidate (record.PrunableOrders), and prune.lua
// then judges it by what Redis holds and by Redis's clock.
const testRetention = time.Hour

// age moves the record's times of the given orders back by d, as if they had happened then.
func (e *env) age(d time.Duration, ids ...string) {
	e.t.Helper()
	e.exec(`UPDATE orders SET created_at = created_at - $2::interval, updated_at = updated_at - $2::interval
		WHERE id = ANY($1)`, ids, fmt.Sprintf("%d milliseconds", d.Milliseconds()))
}

// inRedis reports whether Redis still holds the order (its record, and its user-index entry).
func (e *env) inRedis(o orders.Order) (record, index bool) {
	e.t.Helper()
	k := e.keys.Item(o.ItemID)
	rec, err := e.rdb.HExists(e.ctx, k.Orders(), o.ID).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	// The index: the order's seq in the user's list of the item.
	list, _ := e.rdb.HGet(e.ctx, k.UserOrders(), o.UserID).Result()
	_, seq, _ := strings.Cut(o.ID, ".")
	inList := slices.Contains(strings.Split(list, ","), seq)
	// The user's order index (GET /api/orders reads it) names the item at least as long.
	indexed, err := e.rdb.HExists(e.ctx, e.keys.UserOrderIndex(o.UserID), o.ItemID).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	if inList && !indexed {
		e.t.Fatalf("order %s: in %s's order list of the item, its item not in the user's order index", o.ID, o.UserID)
	}
	return rec, inList
}

func (e *env) prunedAt(id string) bool {
	e.t.Helper()
	var pruned bool
	if err := e.db.QueryRow(e.ctx, `SELECT pruned_at IS NOT NULL FROM orders WHERE id = $1`, id).Scan(&pruned); err != nil {
		e.t.Fatalf("order %s in the record: %v", id, err)
	}
	return pruned
}

func (e *env) pay(o orders.Order) {
	e.t.Helper()
	if _, err := e.ord.Pay(e.ctx, o.UserID, o.ID); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) cancel(o orders.Order) {
	e.t.Helper()
	if _, err := e.ord.Cancel(e.ctx, o.UserID, o.ID); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) itemCounts(item string) map[string]string {
	e.t.Helper()
	h, err := e.rdb.HGetAll(e.ctx, e.keys.Item(item).Hash()).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	held, err := e.rdb.HGetAll(e.ctx, e.keys.Item(item).Held()).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range []string{"stock_total", "stock_left", "reserved", "paid", "seq", "version"} {
		out[f] = h[f]
	}
	for u, q := range held {
		out["held:"+u] = q
	}
	return out
}

// Final orders held by the record longer than the retention leave Redis (record, user index,
// payment); open, recent or unrecorded ones stay, item figures and allowances do not move, a
// later batch is clean and counts them, and the pass is recorded; a second finds nothing.
func TestPruneFinalOrders(t *testing.T) {
	e := newEnv(t)
	e.item("A", 100, 5)
	e.item("B", 100, 5)
	var old, recent, open []orders.Order
	for i := range 6 {
		o := e.buy("A", fmt.Sprintf("u%d", i), 1)
		switch i % 3 {
		case 0:
			e.pay(o)
		case 1:
			e.cancel(o)
		case 2: // expires: its reservation time is moved into the past in Redis below
		}
		old = append(old, o)
		open = append(open, e.buy("B", fmt.Sprintf("u%d", i), 1))
		r := e.buy("B", fmt.Sprintf("w%d", i), 1)
		e.pay(r)
		recent = append(recent, r)
	}
	// The expired third: expire them through the expirer's own path.
	for _, o := range old[2:3] {
		e.expireNow(o)
	}
	for _, o := range old[5:6] {
		e.expireNow(o)
	}
	e.drain()
	// Not yet in the record, and in the record with another status: both stay.
	e.stopPipeline()
	late := e.buy("A", "late", 1)
	e.pay(late)
	other := e.buy("A", "other", 1)
	e.pay(other)
	ids := []string{late.ID, other.ID}
	for _, o := range old {
		ids = append(ids, o.ID)
	}
	for _, o := range open {
		ids = append(ids, o.ID)
	}
	e.age(2*testRetention, ids...)
	e.exec(`INSERT INTO orders (id, item_id, user_id, quantity, price_cents, status, created_at, updated_at)
		VALUES ($1, 'A', 'other', 1, 250, 'cancelled', now() - interval '3 hours', now() - interval '3 hours')`, other.ID)
	beforeA, beforeB := e.itemCounts("A"), e.itemCounts("B")

	r := e.reconciler(reconcile.Options{Retention: testRetention, IdempotencyTTL: time.Millisecond})
	res, err := r.Prune(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pruned != len(old) || res.Gone != 0 || res.Differs != 1 || res.Examined != len(old)+1 {
		t.Fatalf("pass %+v: want %d pruned, 1 differing (the record says cancelled, Redis paid) of %d examined", res, len(old), len(old)+1)
	}
	for _, o := range old {
		if rec, idx := e.inRedis(o); rec || idx {
			t.Errorf("%s (%s): still in Redis (record %v, user index %v)", o.ID, o.Status, rec, idx)
		}
		if !e.prunedAt(o.ID) {
			t.Errorf("%s: not marked pruned in the record", o.ID)
		}
	}
	for _, o := range append(append(append([]orders.Order{}, recent...), open...), late, other) {
		if rec, idx := e.inRedis(o); !rec || !idx {
			t.Errorf("%s: left Redis (record %v, user index %v), want it kept", o.ID, rec, idx)
		}
	}
	if a, b := e.itemCounts("A"), e.itemCounts("B"); fmt.Sprint(a) != fmt.Sprint(beforeA) || fmt.Sprint(b) != fmt.Sprint(beforeB) {
		t.Errorf("item figures or allowances moved:\nA %v\n  %v\nB %v\n  %v", beforeA, a, beforeB, b)
	}
	// GET /api/orders lists what Redis keeps: u0 has its open order of B only.
	list, err := e.ord.List(e.ctx, "u0")
	if err != nil || len(list) != 1 || list[0].ID != open[0].ID {
		t.Errorf("u0's orders after pruning: %v %v, want only %s", list, err, open[0].ID)
	}
	if again, err := r.Prune(e.ctx); err != nil || again.Examined != 1 || again.Differs != 1 {
		t.Errorf("second pass %+v %v: want only the differing order examined again", again, err)
	}

	// The record catches up on the two late orders; then a batch compares everything: the
	// pruned orders are no drift, their units still count.
	e.exec(`DELETE FROM orders WHERE id = $1`, other.ID)
	e.startPipeline()
	e.drain()
	rep, err := e.reconciler(reconcile.Options{Retention: testRetention, IdempotencyTTL: time.Millisecond}).Batch(e.ctx, reconcile.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || rep.Pruned != len(old) {
		t.Fatalf("batch after pruning: clean %v, pruned %d (want %d), drift %v, unverified %v", rep.Clean(), rep.Pruned, len(old), driftKeys(rep.Drift), rep.Unverified)
	}
}

// expireNow makes a reservation due by moving its expiry entry into the past and runs the
// expirer's script on it.
func (e *env) expireNow(o orders.Order) {
	e.t.Helper()
	// The expirer re-checks the order's own expiry too: both move into the past.
	k := e.keys.Item(o.ItemID)
	f := strings.Split(e.rdb.HGet(e.ctx, k.Orders(), o.ID).Val(), "|")
	if len(f) != 6 {
		e.t.Fatalf("order %s in Redis: %q", o.ID, f)
	}
	f[5] = "1"
	if err := e.rdb.HSet(e.ctx, k.Orders(), o.ID, strings.Join(f, "|")).Err(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.rdb.ZAdd(e.ctx, k.Expiry(), redis.Z{Score: 1, Member: o.ID}).Err(); err != nil {
		e.t.Fatal(err)
	}
	res, err := e.ord.ExpireDue(e.ctx, o.ItemID, 100)
	if err != nil || res.Expired < 1 {
		e.t.Fatalf("expire %s: %+v %v", o.ID, res, err)
	}
}

// Within the idempotency window an order never leaves Redis, whatever the record says: an
// idempotent replay still gets its order. Past it, the same order goes.
func TestPruneNeverWithinIdempotencyWindow(t *testing.T) {
	e := newEnv(t)
	e.item("A", 10, 5)
	inv := inventory.NewStore(e.rdb, e.keys, options.Inventory(inventory.Options{ReservationTTL: time.Hour, IdempotencyTTL: time.Hour}))
	res, err := inv.Purchase(e.ctx, inventory.PurchaseRequest{ItemID: "A", UserID: "u", Quantity: 1, IdempotencyKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	o := res.Order
	e.pay(o)
	e.drain()
	e.age(3*testRetention, o.ID) // the record alone would let it go

	pass, err := e.reconciler(reconcile.Options{Retention: testRetention, IdempotencyTTL: testRetention}).Prune(e.ctx)
	if err != nil || pass.Young != 1 || pass.Pruned != 0 {
		t.Fatalf("pass %+v %v: want the order kept as young (Redis created it now)", pass, err)
	}
	again, err := inv.Purchase(e.ctx, inventory.PurchaseRequest{ItemID: "A", UserID: "u", Quantity: 1, IdempotencyKey: "k1"})
	if err != nil || again.Order.ID != o.ID || again.Order.Status != orders.Paid {
		t.Fatalf("replay within the window: %+v %v, want order %s paid", again.Order, err, o.ID)
	}
	pass, err = e.reconciler(reconcile.Options{Retention: testRetention, IdempotencyTTL: time.Millisecond}).Prune(e.ctx)
	if err != nil || pass.Pruned != 1 {
		t.Fatalf("pass past the window %+v %v: want it pruned", pass, err)
	}
}

// Two pruning passes at once, each as if it held the lock (one stalled past it), prune each
// order once: prune.lua's re-check finds what the other removed gone. Through the lock, two
// reconcilers never run passes together.
func TestPruneTwoPassesPruneOnce(t *testing.T) {
	e := newEnv(t)
	e.item("A", 2000, 1000)
	e.item("B", 2000, 1000)
	var ids []string
	for i := range 1200 {
		o := e.buy([]string{"A", "B"}[i%2], fmt.Sprintf("u%d", i%37), 1)
		if i%4 == 0 {
			e.pay(o)
		} else {
			e.cancel(o)
		}
		ids = append(ids, o.ID)
	}
	e.drain()
	e.age(2*testRetention, ids...)
	opt := reconcile.Options{Retention: testRetention, IdempotencyTTL: time.Millisecond}
	fence, err := e.rec.MaxFence(e.ctx, reconcile.LockName)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]reconcile.PruneResult, 2)
	errs := make([]error, 2)
	for i := range 2 {
		r := e.reconciler(opt)
		wg.Go(func() { results[i], errs[i] = reconcile.PrunePass(e.ctx, r, fence+1) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := results[0].Pruned + results[1].Pruned; n != len(ids) {
		t.Fatalf("passes %+v and %+v pruned %d orders together, want each of %d once", results[0], results[1], n, len(ids))
	}
	for _, item := range []string{"A", "B"} {
		if n := e.rdb.HLen(e.ctx, e.keys.Item(item).Orders()).Val(); n != 0 {
			t.Errorf("item %s: %d orders left in Redis", item, n)
		}
	}
	var unmarked int
	if err := e.db.QueryRow(e.ctx, `SELECT count(*) FROM orders WHERE pruned_at IS NULL`).Scan(&unmarked); err != nil || unmarked != 0 {
		t.Errorf("%d orders not marked pruned (%v)", unmarked, err)
	}

	// Through the lock: two reconcilers' passes at once; one runs, the other is told it is busy
	// or finds nothing left.
	e.item("C", 100, 100)
	var more []string
	for i := range 50 {
		o := e.buy("C", fmt.Sprintf("c%d", i), 1)
		e.cancel(o)
		more = append(more, o.ID)
	}
	e.drain()
	e.age(2*testRetention, more...)
	total := 0
	var mu sync.Mutex
	for range 2 {
		r := e.reconciler(opt)
		wg.Go(func() {
			res, err := r.Prune(context.Background())
			if err != nil && !errors.Is(err, reconcile.ErrBusy) {
				t.Error(err)
			}
			mu.Lock()
			total += res.Pruned
			mu.Unlock()
		})
	}
	wg.Wait()
	if total != len(more) {
		t.Fatalf("two reconcilers pruned %d orders, want %d once each", total, len(more))
	}
}

// A paid order's payment goes with it (its payments-hash field and its payment id index); an
// order whose payment is being refunded stays until the refund is recorded.
func TestPrunePayments(t *testing.T) {
	e := newEnv(t)
	e.item("A", 10, 5)
	paid := e.buy("A", "u1", 1)
	attach := func(o orders.Order, pid string) {
		t.Helper()
		if err := e.ord.IndexPayment(e.ctx, pid, o.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ord.AttachPayment(e.ctx, o.UserID, o.ID, pid); err != nil {
			t.Fatal(err)
		}
	}
	attach(paid, "pi_paid")
	if _, s, err := e.ord.SettlePayment(e.ctx, "pi_paid", "evt_1"); err != nil || s != orders.SettledPaid {
		t.Fatalf("settle: %v %v", s, err)
	}
	refunding := e.buy("A", "u2", 1)
	attach(refunding, "pi_late")
	e.cancel(refunding)
	if _, s, err := e.ord.SettlePayment(e.ctx, "pi_late", "evt_2"); err != nil || s != orders.SettledRefund {
		t.Fatalf("settle after cancel: %v %v", s, err)
	}
	e.drain()
	e.age(2*testRetention, paid.ID, refunding.ID)
	opt := reconcile.Options{Retention: testRetention, IdempotencyTTL: time.Millisecond}
	res, err := e.reconciler(opt).Prune(e.ctx)
	if err != nil || res.Pruned != 1 || res.Payment != 1 || res.PaymentIndex != 1 {
		t.Fatalf("pass %+v %v: want the paid order pruned with its payment index, the refunding one kept", res, err)
	}
	k := e.keys.Item("A")
	if e.rdb.HExists(e.ctx, k.Payments(), paid.ID).Val() || e.rdb.Exists(e.ctx, e.keys.PaymentOrder("pi_paid")).Val() != 0 {
		t.Error("the paid order's payment is still in Redis")
	}
	if !e.rdb.HExists(e.ctx, k.Payments(), refunding.ID).Val() || e.rdb.Exists(e.ctx, e.keys.PaymentOrder("pi_late")).Val() != 1 {
		t.Error("the refunding payment left Redis before its refund was recorded")
	}
	if ok, err := e.ord.FinishRefund(e.ctx, refunding.ID, "pi_late"); err != nil || !ok {
		t.Fatalf("finish refund: %v %v", ok, err)
	}
	e.drain()
	e.age(2*testRetention, refunding.ID)
	if res, err := e.reconciler(opt).Prune(e.ctx); err != nil || res.Pruned != 1 || res.PaymentIndex != 1 {
		t.Fatalf("pass after the refund %+v %v: want it pruned", res, err)
	}
	if rep, err := e.reconciler(opt).Batch(e.ctx, reconcile.BatchOptions{}); err != nil || !rep.Clean() {
		t.Fatalf("batch: %v, drift %v, payments %+v", err, rep.Drift, rep.Payments)
	}
}

// A pass that removed orders and stopped before recording them (here: removed by hand) leaves
// no drift: batch takes the absence of an order final past the retention as expected, and the
// next pass records it as gone. Restore leaves pruned orders out and keeps their units.
func TestPrunedOrdersAcrossBatchAndRestore(t *testing.T) {
	e := newEnv(t)
	e.item("A", 100, 5)
	var ids []string
	var paid []orders.Order
	for i := range 8 {
		o := e.buy("A", fmt.Sprintf("u%d", i), 2)
		if i%2 == 0 {
			e.pay(o)
			paid = append(paid, o)
		} else {
			e.cancel(o)
		}
		ids = append(ids, o.ID)
	}
	keep := e.buy("A", "u0", 1)
	e.drain()
	e.age(2*testRetention, ids...)
	opt := reconcile.Options{Retention: testRetention, IdempotencyTTL: time.Millisecond, QuietFor: time.Millisecond}
	k := e.keys.Item("A")
	if err := e.rdb.HDel(e.ctx, k.Orders(), ids[0]).Err(); err != nil { // "a pass stopped here"
		t.Fatal(err)
	}
	if rep, err := e.reconciler(opt).Batch(e.ctx, reconcile.BatchOptions{}); err != nil || !rep.Clean() || rep.Pruned != 1 {
		t.Fatalf("batch with an unrecorded removal: %v, pruned %d, drift %v", err, rep.Pruned, driftKeys(rep.Drift))
	}
	res, err := e.reconciler(opt).Prune(e.ctx)
	if err != nil || res.Gone != 1 || res.Pruned != len(ids)-1 {
		t.Fatalf("pass %+v %v: want 1 gone, %d pruned", res, err, len(ids)-1)
	}
	before := e.itemCounts("A")
	rr, err := e.reconciler(opt).Restore(e.ctx, reconcile.RestoreOptions{Items: []string{"A"}})
	if err != nil || len(rr.Restored) != 1 || rr.Restored[0].Orders != 1 {
		t.Fatalf("restore: %+v %v, want the one open order written", rr, err)
	}
	after := e.itemCounts("A")
	delete(before, "version")
	delete(after, "version")
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("restore changed the figures:\n%v\n%v", before, after)
	}
	if n := e.rdb.HLen(e.ctx, k.Orders()).Val(); n != 1 {
		t.Errorf("%d orders in Redis after restore, want only %s", n, keep.ID)
	}
	for _, o := range paid {
		if _, idx := e.inRedis(o); idx {
			t.Errorf("restore put pruned %s back in the user index", o.ID)
		}
	}
	if rep, err := e.reconciler(opt).Batch(e.ctx, reconcile.BatchOptions{}); err != nil || !rep.Clean() {
		t.Fatalf("batch after restore: %v, drift %v", err, driftKeys(rep.Drift))
	}
	// Purchases, pruning and restore write no shard-wide user item zset (gone from the layout).
	if left := testenv.Matching(t, e.rdb, e.keys.Prefix+"*uitems:*"); len(left) > 0 {
		t.Errorf("user item zsets written: %v", left)
	}
}

// Memory is bounded in time: after a sale of N orders, all made final and relayed, and a
// pruning pass past the retention, Redis's used_memory returns to near where it started (what
// stays by design is the paid users' allowances: held and paidby, a field each).
func TestPruneMemoryReturns(t *testing.T) {
	rdb, keys, _ := testenv.PrivateRedis(t)
	e := newEnvOn(t, rdb, keys)
	const n, users = 1500, 300
	e.item("A", n, n)
	e.drain()
	start := usedMemory(t, e)
	var ids []string
	for i := range n {
		o := e.buy("A", fmt.Sprintf("shopper-%04d", i%users), 1)
		if i%2 == 0 {
			e.pay(o)
		} else {
			e.cancel(o)
		}
		ids = append(ids, o.ID)
	}
	e.drain()
	peak := usedMemory(t, e)
	e.age(2*testRetention, ids...)
	res, err := e.reconciler(reconcile.Options{Retention: testRetention, IdempotencyTTL: time.Millisecond}).Prune(e.ctx)
	if err != nil || res.Pruned != n {
		t.Fatalf("pass %+v %v: want all %d pruned", res, err, n)
	}
	// The scripts' call records live until their calls' deadlines pass (exactlyonce.CallDeadline).
	goal := start + (peak-start)/10
	deadline := time.Now().Add(60 * time.Second)
	after := usedMemory(t, e)
	for after > goal && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		after = usedMemory(t, e)
	}
	t.Logf("used_memory: start %d, after the sale %d (+%d B per order), after pruning %d (+%d B per order)",
		start, peak, (peak-start)/n, after, (after-start)/n)
	if after > goal {
		t.Fatalf("used_memory %d after pruning, want at most %d: start %d + a tenth of the sale's %d", after, goal, start, peak-start)
	}
}

func usedMemory(t *testing.T, e *env) int64 {
	t.Helper()
	info, err := e.rdb.Info(e.ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no used_memory in INFO memory")
	return 0
}

// On a Redis Cluster every key of prune.lua's call is in its item's slot and the payment index
// is removed in its own: a pass prunes paid orders with their payments, no CROSSSLOT.
func TestPruneOnCluster(t *testing.T) {
	rdb, keys := testenv.Cluster(t)
	e := newEnvOn(t, rdb, keys)
	var ids []string
	for i, item := range []string{"A", "B", "C", "D"} {
		e.item(item, 10, 5)
		o := e.buy(item, fmt.Sprintf("u%d", i%2), 1)
		pid := fmt.Sprintf("pi_%d", i)
		if err := e.ord.IndexPayment(e.ctx, pid, o.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ord.AttachPayment(e.ctx, o.UserID, o.ID, pid); err != nil {
			t.Fatal(err)
		}
		if _, s, err := e.ord.SettlePayment(e.ctx, pid, "evt_"+pid); err != nil || s != orders.SettledPaid {
			t.Fatalf("settle %s: %v %v", pid, s, err)
		}
		ids = append(ids, o.ID)
	}
	e.drain()
	e.age(2*testRetention, ids...)
	res, err := e.reconciler(reconcile.Options{Retention: testRetention, IdempotencyTTL: time.Millisecond}).Prune(e.ctx)
	if err != nil || res.Pruned != len(ids) || res.PaymentIndex != len(ids) {
		t.Fatalf("pass %+v %v: want %d orders and payment index entries pruned", res, err, len(ids))
	}
}

// Every reply of prune.lua, called directly with what the record would send.
func TestPruneScriptReplies(t *testing.T) {
	e := newEnv(t)
	e.item("A", 10, 5)
	r := e.reconciler(reconcile.Options{Retention: testRetention, IdempotencyTTL: time.Millisecond})
	open := e.buy("A", "u1", 1)
	paid := e.buy("A", "u2", 2)
	e.pay(paid)
	as := func(o orders.Order, status string) record.PrunableOrder {
		return record.PrunableOrder{ID: o.ID, Item: o.ItemID, User: o.UserID, Status: status, Qty: o.Quantity, Price: o.PriceCents}
	}
	otherQty := as(paid, "paid")
	otherQty.Qty = 1
	k := e.keys.Item("A")
	for _, c := range []struct {
		name   string
		setup  func()
		orders []record.PrunableOrder
		want   []string // nil: the item is being restored
		err    string
	}{
		{name: "open in Redis", orders: []record.PrunableOrder{as(open, "cancelled")}, want: []string{"open"}},
		{name: "other content", orders: []record.PrunableOrder{otherQty}, want: []string{"differs"}},
		{name: "other status", orders: []record.PrunableOrder{as(paid, "cancelled")}, want: []string{"differs"}},
		{name: "no such order", orders: []record.PrunableOrder{{ID: "A.99", Item: "A", User: "u9", Status: "paid", Qty: 1, Price: 250}}, want: []string{"gone"}},
		{name: "restoring", setup: func() { e.rdb.Set(e.ctx, k.Restoring(), 1, 0) }, orders: []record.PrunableOrder{as(paid, "paid")}, want: nil},
		{name: "newer restore", setup: func() { e.rdb.Del(e.ctx, k.Restoring()); e.rdb.Set(e.ctx, k.RestoreFence(), 1000, 0) },
			orders: []record.PrunableOrder{as(paid, "paid")}, err: "newer restore"},
		{name: "another item's order", setup: func() { e.rdb.Del(e.ctx, k.RestoreFence()) },
			orders: []record.PrunableOrder{{ID: "B.1", Item: "A", User: "u", Status: "paid", Qty: 1, Price: 1}}, err: "is not of item"},
		{name: "bad record", orders: []record.PrunableOrder{{ID: "A.1", Item: "A", User: "", Status: "paid", Qty: 1, Price: 1}}, err: "bad record"},
		{name: "pruned", orders: []record.PrunableOrder{as(paid, "paid"), as(open, "expired")}, want: []string{"pruned|", "open"}},
	} {
		if c.setup != nil {
			c.setup()
		}
		got, err := reconcile.PruneChunk(e.ctx, r, 100, "A", c.orders)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v %v, want an error saying %q", c.name, got, err, c.err)
			}
		case err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) || (got == nil) != (c.want == nil):
			t.Errorf("%s: %q %v, want %q", c.name, got, err, c.want)
		}
	}
	if rec, idx := e.inRedis(paid); rec || idx {
		t.Errorf("the pruned order is still in Redis (record %v, index %v)", rec, idx)
	}
	if rec, idx := e.inRedis(open); !rec || !idx {
		t.Errorf("the open order left Redis (record %v, index %v)", rec, idx)
	}
}
