package procs

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/keyspace"
)

// Order is one order as Redis holds it.
type Order struct {
	ID, Item, User, Status string
	Qty                    int
}

// Stock is one item's counters as Redis holds them.
type Stock struct{ Total, Left, Reserved, Paid int }

// Ledger is the sale's live state in Redis: the items' counters and every order.
type Ledger struct {
	Items  map[string]Stock
	Orders map[string]Order // by id
	Broken int              // items whose stock does not add up (oversold)
}

// CheckRedis reads the items (id -> per-user limit) and checks, for each, that stock never
// went below zero and adds up (left + reserved + paid = total), that its orders add up to its
// reserved and paid counters, and that no user holds more than the limit. Each violation fails
// the test; the ledger says how many items broke.
func CheckRedis(t testing.TB, rdb redis.UniversalClient, space keyspace.Space, items map[string]int) Ledger {
	t.Helper()
	ctx := context.Background()
	l := Ledger{Items: map[string]Stock{}, Orders: map[string]Order{}}
	for item, limit := range items {
		k := space.Item(item)
		h, err := rdb.HGetAll(ctx, k.Hash()).Result()
		if err != nil {
			t.Fatalf("%s: %v", item, err)
		}
		var st Stock
		st.Total, _ = strconv.Atoi(h["stock_total"])
		st.Left, _ = strconv.Atoi(h["stock_left"])
		st.Reserved, _ = strconv.Atoi(h["reserved"])
		st.Paid, _ = strconv.Atoi(h["paid"])
		l.Items[item] = st
		if st.Left < 0 || st.Left+st.Reserved+st.Paid != st.Total {
			l.Broken++
			t.Errorf("%s: stock_left %d + reserved %d + paid %d != stock_total %d", item, st.Left, st.Reserved, st.Paid, st.Total)
		}
		packed, err := rdb.HGetAll(ctx, k.Orders()).Result()
		if err != nil {
			t.Fatalf("%s orders: %v", item, err)
		}
		var reserved, paid int
		perUser := map[string]int{}
		for id, p := range packed {
			o, err := ParseOrder(id, item, p)
			if err != nil {
				t.Fatal(err)
			}
			l.Orders[id] = o
			switch o.Status {
			case "reserved":
				reserved += o.Qty
				perUser[o.User] += o.Qty
			case "paid":
				paid += o.Qty
				perUser[o.User] += o.Qty
			}
		}
		if reserved != st.Reserved || paid != st.Paid {
			l.Broken++
			t.Errorf("%s: its orders hold %d reserved and %d paid, the item says %d and %d", item, reserved, paid, st.Reserved, st.Paid)
		}
		for u, q := range perUser {
			if q > limit {
				t.Errorf("%s: user %s holds %d, over the limit %d", item, u, q, limit)
			}
		}
	}
	return l
}

// ParseOrder reads a packed order `user|quantity|price_cents|status|created_ms|expires_ms`.
func ParseOrder(id, item, packed string) (Order, error) {
	p := strings.Split(packed, "|")
	if len(p) < 4 {
		return Order{}, fmt.Errorf("order %s of %s: %q is not user|qty|price|status|created|expires", id, item, packed)
	}
	qty, err := strconv.Atoi(p[1])
	if err != nil {
		return Order{}, fmt.Errorf("order %s of %s: quantity %q", id, item, p[1])
	}
	return Order{ID: id, Item: item, User: p[0], Status: p[3], Qty: qty}, nil
}

// Answers are what the calls tell about the sale, beside Redis's orders.
type Answers struct {
	Calls, Created int
	Unknown        int // calls of unknown outcome
	Unchanged      int // answered 503 "nothing was changed"
	Lost           int // orders answered to a shopper and missing from Redis
	Duplicates     int // orders nobody was answered beyond the calls of unknown outcome, or one key's second order
	Slowest        time.Duration
}

// CheckAnswers checks the calls against Redis's orders: every order a shopper was answered
// exists, one Idempotency-Key never answered two orders, and every order nobody was answered
// has a purchase call of unknown outcome by its user for its item. Each violation fails the test.
func CheckAnswers(t testing.TB, calls []*Call, orders map[string]Order) Answers {
	t.Helper()
	var a Answers
	answered := map[string]bool{}
	unknown := map[[2]string]int{}
	keyOrders := map[string]map[string]bool{}
	for _, c := range calls {
		a.Calls++
		if c.Status == 503 && !c.Unknown() {
			a.Unchanged++
		}
		if c.Unknown() {
			a.Unknown++
			if c.Kind == "purchase" {
				unknown[[2]string{c.User, c.Item}]++
			}
		}
		if c.Kind == "purchase" && c.Took > a.Slowest {
			a.Slowest = c.Took
		}
		if c.Kind != "purchase" || c.OrderID == "" {
			continue
		}
		if c.Status == 201 {
			a.Created++
		}
		answered[c.OrderID] = true
		if _, ok := orders[c.OrderID]; !ok {
			a.Lost++
			t.Errorf("order %s answered %d to %s is not in Redis", c.OrderID, c.Status, c.User)
		}
		if c.Key != "" {
			kk := c.User + "/" + c.Key
			if keyOrders[kk] == nil {
				keyOrders[kk] = map[string]bool{}
			}
			keyOrders[kk][c.OrderID] = true
		}
	}
	for kk, ids := range keyOrders {
		if len(ids) > 1 {
			a.Duplicates += len(ids) - 1
			t.Errorf("one Idempotency-Key (%s) answered %d different orders", kk, len(ids))
		}
	}
	unanswered := map[[2]string]int{}
	for id, o := range orders {
		if !answered[id] {
			unanswered[[2]string{o.User, o.Item}]++
		}
	}
	for ui, n := range unanswered {
		if n > unknown[ui] {
			a.Duplicates += n - unknown[ui]
			t.Errorf("%s holds %d orders of %s nobody was answered, with only %d calls of unknown outcome", ui[0], n, ui[1], unknown[ui])
		}
	}
	return a
}

// WaitPostgres waits until Postgres holds exactly Redis's orders (each once, with the same
// item, user, quantity and status), or fails the test with the last difference.
func WaitPostgres(t testing.TB, db *pgxpool.Pool, orders map[string]Order, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for {
		diff := diffPostgres(ctx, db, orders)
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Postgres does not hold exactly Redis's orders after %v: %s", within, diff)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// diffPostgres describes the first difference between Postgres's orders and Redis's, or "".
func diffPostgres(ctx context.Context, db *pgxpool.Pool, orders map[string]Order) string {
	rows, err := db.Query(ctx, `SELECT id, item_id, user_id, quantity, status FROM orders`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	seen := map[string]bool{}
	for rows.Next() {
		var o Order
		if err := rows.Scan(&o.ID, &o.Item, &o.User, &o.Qty, &o.Status); err != nil {
			return err.Error()
		}
		if seen[o.ID] {
			return "order " + o.ID + " twice"
		}
		seen[o.ID] = true
		if r, ok := orders[o.ID]; !ok || r != o {
			return fmt.Sprintf("Postgres has %+v, Redis %+v", o, r)
		}
	}
	if err := rows.Err(); err != nil {
		return err.Error()
	}
	if len(seen) != len(orders) {
		return fmt.Sprintf("Postgres holds %d orders, Redis %d", len(seen), len(orders))
	}
	return ""
}

// ReconcileBatch runs `reconciler batch --json` (Redis against Postgres) with env and fails
// the test unless it exits 0 (no drift).
func ReconcileBatch(t testing.TB, reconciler string, env []string) {
	t.Helper()
	cmd := exec.Command(reconciler, "batch", "--json")
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("reconciler batch: %v\n%s", err, Tail(out.Bytes(), 3000))
	}
}
