package orders_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestTransitions is the lifecycle contract: every transition and every refusal, from every
// state, by the owner and by another user. A refusal changes nothing, except that a pay or
// cancel reaching an overdue reservation expires it (stock back) before refusing.
func TestTransitions(t *testing.T) {
	e := newEnv(t, time.Hour)
	ctx := context.Background()
	var paidMu sync.Mutex
	paidTotals := map[string]int64{}
	e.ord.Hooks.PaidChanged = func(_ context.Context, item string, total, _ int64) {
		paidMu.Lock()
		paidTotals[item] = total
		paidMu.Unlock()
	}
	pay := func(user string) func(o orders.Order) (orders.Order, error) {
		return func(o orders.Order) (orders.Order, error) { return e.ord.Pay(ctx, user, o.ID) }
	}
	cancel := func(user string) func(o orders.Order) (orders.Order, error) {
		return func(o orders.Order) (orders.Order, error) { return e.ord.Cancel(ctx, user, o.ID) }
	}
	states := map[string]func(o orders.Order){
		"reserved":  func(orders.Order) {},
		"paid":      func(o orders.Order) { must(t)(e.ord.Pay(ctx, "alice", o.ID)) },
		"cancelled": func(o orders.Order) { must(t)(e.ord.Cancel(ctx, "alice", o.ID)) },
		"overdue":   func(o orders.Order) { e.backdate(o) }, // time ran out, expirer not there yet
		"expired": func(o orders.Order) {
			e.backdate(o)
			if r, err := e.ord.ExpireDue(ctx, o.ItemID, 10); err != nil || r.Expired != 1 {
				t.Fatalf("expire %s: %+v %v", o.ID, r, err)
			}
		},
	}
	cases := []struct {
		state   string
		action  string
		do      func(o orders.Order) (orders.Order, error)
		wantErr error
		want    orders.Status // the order's status afterwards
		changed bool          // whether the call changes stored state
	}{
		{"reserved", "pay", pay("alice"), nil, orders.Paid, true},
		{"reserved", "cancel", cancel("alice"), nil, orders.Cancelled, true},
		{"reserved", "pay another user's", pay("bob"), orders.ErrNotFound, orders.Reserved, false},
		{"reserved", "cancel another user's", cancel("bob"), orders.ErrNotFound, orders.Reserved, false},
		{"paid", "pay twice", pay("alice"), orders.ErrInvalidState, orders.Paid, false},
		{"paid", "cancel", cancel("alice"), orders.ErrInvalidState, orders.Paid, false},
		{"paid", "pay another user's", pay("bob"), orders.ErrNotFound, orders.Paid, false},
		{"cancelled", "pay", pay("alice"), orders.ErrInvalidState, orders.Cancelled, false},
		{"cancelled", "cancel twice", cancel("alice"), orders.ErrInvalidState, orders.Cancelled, false},
		{"expired", "pay", pay("alice"), orders.ErrExpired, orders.Expired, false},
		{"expired", "cancel", cancel("alice"), orders.ErrInvalidState, orders.Expired, false},
		{"overdue", "pay", pay("alice"), orders.ErrExpired, orders.Expired, true},
		{"overdue", "cancel", cancel("alice"), orders.ErrInvalidState, orders.Expired, true},
		{"overdue", "pay another user's", pay("bob"), orders.ErrNotFound, orders.Reserved, false},
	}
	for i, tc := range cases {
		t.Run(tc.state+"/"+tc.action, func(t *testing.T) {
			item := fmt.Sprintf("it%d", i)
			e.t = t
			e.item(item, 10, 10)
			o := e.buy(item, "alice", 2)
			e.buy(item, "bob", 1) // another user's allowance must not move
			states[tc.state](o)
			before := e.check(item)

			got, err := tc.do(o)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != orders.ErrNotFound && (got.ID != o.ID || got.Status != tc.want ||
				!got.ExpiresAt.After(got.CreatedAt.Add(-time.Hour))) {
				t.Errorf("returned order %+v, want %s with status %s", got, o.ID, tc.want)
			}
			after := e.check(item)
			if s := after.Orders[o.ID].Status; s != tc.want {
				t.Errorf("stored status %s, want %s", s, tc.want)
			}
			if !tc.changed {
				before.Orders, after.Orders = nil, nil
				if !reflect.DeepEqual(before, after) {
					t.Errorf("a refusal changed state:\nbefore %+v\nafter  %+v", before, after)
				}
				return
			}
			if after.Version != before.Version+1 {
				t.Errorf("version %d -> %d, want +1", before.Version, after.Version)
			}
			q := o.Quantity
			switch tc.want {
			case orders.Paid:
				if after.Paid != before.Paid+q || after.Left != before.Left || after.PaidBy["alice"] != q {
					t.Errorf("pay moved counters wrong: %+v -> %+v", before, after)
				}
				paidMu.Lock()
				if paidTotals[item] != after.Paid {
					t.Errorf("PaidChanged got %d, want %d", paidTotals[item], after.Paid)
				}
				paidMu.Unlock()
			case orders.Cancelled, orders.Expired:
				if after.Left != before.Left+q || after.Reserved != before.Reserved-q || after.Held["alice"] != 0 {
					t.Errorf("stock or allowance not returned: %+v -> %+v", before, after)
				}
			}
		})
	}
}

// TestMalformedAndUnknownOrders: ids that name no order are not found for pay and cancel.
func TestMalformedAndUnknownOrders(t *testing.T) {
	e := newEnv(t, time.Hour)
	ctx := context.Background()
	e.item("it", 5, 5)
	o := e.buy("it", "alice", 1)
	before := e.check("it")
	for _, id := range []string{"", "nope", "it.", ".1", "it.1a", "it.-1", "it.999", "other.1", "it.1.2",
		"a b.1", "it.123456789012345678901"} {
		if _, err := e.ord.Pay(ctx, "alice", id); !errors.Is(err, orders.ErrNotFound) {
			t.Errorf("pay %q: %v, want not found", id, err)
		}
		if _, err := e.ord.Cancel(ctx, "alice", id); !errors.Is(err, orders.ErrNotFound) {
			t.Errorf("cancel %q: %v, want not found", id, err)
		}
	}
	if _, err := e.ord.Pay(ctx, "bad|user", o.ID); !errors.Is(err, orders.ErrNotFound) {
		t.Errorf("pay by a malformed user: %v, want not found", err)
	}
	for _, b := range []int{0, -1, orders.MaxExpireBatch + 1} {
		if _, err := e.ord.ExpireDue(ctx, "it", b); err == nil {
			t.Errorf("expire with batch %d: no error", b)
		}
	}
	if _, err := e.ord.ExpireDue(ctx, "bad id", 10); err == nil {
		t.Error("expire of a malformed item id: no error")
	}
	after := e.check("it")
	if !reflect.DeepEqual(before, after) {
		t.Errorf("refusals changed state:\nbefore %+v\nafter  %+v", before, after)
	}
}

// TestScriptsRefuseNonFiniteNumbers: tonumber reads "inf" and "nan", so a hold or an amount
// from ARGV must be a bounded whole number; anything else is an error reply that writes nothing.
func TestScriptsRefuseNonFiniteNumbers(t *testing.T) {
	e := newEnv(t, time.Hour)
	ctx := context.Background()
	e.item("it", 5, 5)
	o := e.buy("it", "alice", 1)
	before := e.check("it")
	for _, bad := range []string{"inf", "-inf", "nan", "1e400", "1.5", "-1", "1e14"} {
		calls := []struct {
			name string
			args []any
		}{
			{"pay", []any{"it", o.ID, "alice", "", "", bad}},
			{"pay", []any{"it", o.ID, "alice", "", "", 0, bad}},
			{"expire", []any{"it", bad, o.ID}},
			{"refund_order", []any{"it", o.ID, "pi_x", "full", bad, "0", "", ""}},
			{"refund_order", []any{"it", o.ID, "pi_x", "partial", bad, "0", "", ""}},
		}
		if bad == "1e14" {
			calls = calls[:1] // a whole number: only the hold's bound refuses it
		}
		for _, c := range calls {
			if err := e.ord.RunChange(ctx, c.name, "it", c.args...); err == nil {
				t.Errorf("%s %v: no error", c.name, c.args)
			}
		}
	}
	if after := e.check("it"); !reflect.DeepEqual(before, after) {
		t.Errorf("refusals changed state:\nbefore %+v\nafter  %+v", before, after)
	}
}

// TestExpireOnlyDue: the expirer takes due reservations only, in bounded batches, and an
// entry whose order a payment already settled is dropped without touching stock.
func TestExpireOnlyDue(t *testing.T) {
	e := newEnv(t, time.Hour)
	ctx := context.Background()
	e.item("it", 100, 100)
	var due []orders.Order
	for i := 0; i < 7; i++ {
		o := e.buy("it", fmt.Sprintf("u%d", i%3), 1)
		e.backdate(o)
		due = append(due, o)
	}
	fresh := e.buy("it", "u0", 3)
	// A stale entry: paid order put back in the index (as if a crash left it there).
	paid := e.buy("it", "u1", 1)
	must(t)(e.ord.Pay(ctx, "u1", paid.ID))
	e.rdb.ZAdd(ctx, e.keys.Item("it").Expiry(), redisZ(0, paid.ID))

	r, err := e.ord.ExpireDue(ctx, "it", 3)
	if err != nil || r != (orders.ExpireResult{Read: 3, Examined: 3, Expired: 2, Units: 2, Calls: 1}) {
		// The stale entry has score 0, so it comes first.
		t.Fatalf("first batch: %+v %v", r, err)
	}
	total := r.Expired
	for {
		r, err := e.ord.ExpireDue(ctx, "it", 3)
		if err != nil {
			t.Fatal(err)
		}
		total += r.Expired
		if r.Examined < 3 {
			break
		}
	}
	if total != int64(len(due)) {
		t.Errorf("expired %d, want %d", total, len(due))
	}
	l := e.check("it")
	if l.Orders[fresh.ID].Status != orders.Reserved || l.Orders[paid.ID].Status != orders.Paid {
		t.Errorf("fresh %s, paid %s: the expirer touched orders that were not due", l.Orders[fresh.ID].Status, l.Orders[paid.ID].Status)
	}
	if r, err := e.ord.ExpireDue(ctx, "it", 3); err != nil || r != (orders.ExpireResult{}) {
		t.Errorf("nothing due: %+v %v", r, err)
	}
	if r, err := e.ord.ExpireDue(ctx, "never-created", 3); err != nil || r != (orders.ExpireResult{}) {
		t.Errorf("unknown item: %+v %v", r, err)
	}
}

// TestExpireByRedisClock: reservations fall due by Redis's clock, so a host whose clock runs an
// hour behind still expires them when Redis says they are due, not an hour late.
func TestExpireByRedisClock(t *testing.T) {
	e := newEnv(t, 200*time.Millisecond)
	ctx := context.Background()
	e.item("it", 10, 10)
	e.ord.SetHostClock(func() time.Time { return time.Now().Add(-time.Hour) })
	o := e.buy("it", "u0", 2)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := e.ord.ExpireDue(ctx, "it", 10)
		if err != nil {
			t.Fatal(err)
		}
		if r.Expired == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reservation was not expired 10 s after Redis said it was due: %+v", r)
		}
		time.Sleep(20 * time.Millisecond) // waiting on the reservation to fall due, with a deadline
	}
	if l := e.check("it"); l.Orders[o.ID].Status != orders.Expired || l.Left != 10 {
		t.Fatalf("after the expiry: %s, stock left %d", l.Orders[o.ID].Status, l.Left)
	}
}

// TestLifecycleOnCluster runs pay, cancel and expiry on a 3-master Redis Cluster: every key of
// a script is in the item's slot (no CROSSSLOT), and scripts are loaded on every master.
func TestLifecycleOnCluster(t *testing.T) {
	rdb, keys := testenv.Cluster(t)
	e := newEnvOn(t, rdb, keys, time.Hour)
	ctx := context.Background()
	items := []string{"a", "b", "c", "d", "e", "f"}
	for _, item := range items {
		e.item(item, 10, 10)
		p, c, x := e.buy(item, "alice", 1), e.buy(item, "alice", 2), e.buy(item, "bob", 3)
		must(t)(e.ord.Pay(ctx, "alice", p.ID))
		must(t)(e.ord.Cancel(ctx, "alice", c.ID))
		e.backdate(x)
	}
	// One sweep finds the due items across the masters (pipelined) and expires them.
	x := orders.NewExpirer(e.ord, time.Hour, 100)
	if n, err := x.Sweep(ctx); err != nil || n != int64(len(items)) {
		t.Fatalf("sweep: %d %v", n, err)
	}
	for _, item := range items {
		l := e.check(item)
		if l.Left != 9 || l.Paid != 1 {
			t.Errorf("%s: left %d paid %d", item, l.Left, l.Paid)
		}
	}
}

func must(t testing.TB) func(orders.Order, error) {
	return func(_ orders.Order, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestNothingWrittenWhileItemIsRestored: between restore_begin and restore_finish orders exist
// without their item hash. Pay, cancel and the expirer must not write then: HINCRBY would make a
// partial item hash, and restore_finish would overwrite it with figures that still count those
// orders as reserved.
func TestNothingWrittenWhileItemIsRestored(t *testing.T) {
	e := newEnv(t, time.Hour)
	ctx := context.Background()
	e.item("it", 10, 10)
	due := e.buy("it", "alice", 2)
	e.backdate(due)
	toPay := e.buy("it", "bob", 3)
	toCancel := e.buy("it", "carol", 1)
	k := e.keys.Item("it")
	item := e.rdb.HGetAll(ctx, k.Hash()).Val()
	events := e.rdb.XLen(ctx, k.Outbox()).Val()
	e.rdb.Del(ctx, k.Hash()) // what restore_begin did; restore_put rewrote the rest

	if r, err := e.ord.ExpireDue(ctx, "it", 10); err != nil || r.Expired != 0 {
		t.Errorf("expire during a restore: %+v %v", r, err)
	}
	if _, err := e.ord.Pay(ctx, "bob", toPay.ID); err == nil {
		t.Error("pay during a restore succeeded")
	}
	if _, err := e.ord.Pay(ctx, "alice", due.ID); err == nil {
		t.Error("pay of an overdue order during a restore succeeded")
	}
	if _, err := e.ord.Cancel(ctx, "carol", toCancel.ID); err == nil {
		t.Error("cancel during a restore succeeded")
	}
	if _, err := e.ord.Pay(ctx, "bob", "it.99"); !errors.Is(err, orders.ErrNotFound) {
		t.Errorf("pay of an unknown order during a restore: %v, want not found", err)
	}
	if n := e.rdb.Exists(ctx, k.Hash()).Val(); n != 0 {
		t.Fatalf("calls during a restore created a partial item hash: %v", e.rdb.HGetAll(ctx, k.Hash()).Val())
	}
	if n := e.rdb.XLen(ctx, k.Outbox()).Val(); n != events {
		t.Errorf("calls during a restore appended %d events", n-events)
	}

	// restore_finish wrote the item back: everything works again, and the books balance.
	fields := make([]any, 0, 2*len(item))
	for f, v := range item {
		fields = append(fields, f, v)
	}
	e.rdb.HSet(ctx, k.Hash(), fields...)
	if r, err := e.ord.ExpireDue(ctx, "it", 10); err != nil || r.Expired != 1 {
		t.Errorf("expire after the restore: %+v %v", r, err)
	}
	must(t)(e.ord.Pay(ctx, "bob", toPay.ID))
	must(t)(e.ord.Cancel(ctx, "carol", toCancel.ID))
	l := e.check("it")
	if l.Left != 7 || l.Reserved != 0 || l.Paid != 3 {
		t.Errorf("after the restore: left %d reserved %d paid %d, want 7 0 3", l.Left, l.Reserved, l.Paid)
	}
}
