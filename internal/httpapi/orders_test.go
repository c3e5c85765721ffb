package httpapi_test

import (
	"context"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestOrderLifecycleContract drives pay and cancel through the real router: every status and
// code of the contract for them, the Order body, and that refusals change nothing.
func TestOrderLifecycleContract(t *testing.T) {
	a := newTestAPI(t, func(c *config.Config) {
		c.LimitPay, c.LimitCancel = config.Limit{}, config.Limit{} // rate limits have their own tests
	})
	ctx := context.Background()
	alice, bob := a.token("alice"), a.token("bob")

	// buy reserves 2 units of a fresh item for alice through the purchase route.
	n := 0
	buy := func() (item, id string) {
		t.Helper()
		n++
		item = "lc" + strconv.Itoa(n)
		a.item(item, 10, 5)
		r := a.do("POST", "/api/items/"+item+"/purchase", alice, map[string]any{"quantity": 2})
		if r.Status != http.StatusCreated {
			t.Fatalf("purchase: %d %s", r.Status, r.Raw)
		}
		return item, r.Body["order"].(map[string]any)["id"].(string)
	}
	// overdue moves a reservation's expires_at into the past without waiting for it.
	overdue := func(item, id string) {
		t.Helper()
		k := a.keys.Item(item)
		packed := a.rdb.HGet(ctx, k.Orders(), id).Val()
		f := strings.Split(packed, "|")
		past := time.Now().Add(-time.Minute).UnixMilli()
		f[5] = strconv.FormatInt(past, 10)
		a.rdb.HSet(ctx, k.Orders(), id, strings.Join(f, "|"))
		a.rdb.ZAdd(ctx, k.Expiry(), redis.Z{Score: float64(past), Member: id})
	}
	setups := map[string]func(item, id string){
		"reserved":  func(string, string) {},
		"paid":      func(_, id string) { a.do("POST", "/api/orders/"+id+"/pay", alice, nil) },
		"cancelled": func(_, id string) { a.do("POST", "/api/orders/"+id+"/cancel", alice, nil) },
		"overdue":   overdue,
		"expired": func(item, id string) {
			overdue(item, id)
			if r, err := a.ord.ExpireDue(ctx, item, 10); err != nil || r.Expired != 1 {
				t.Fatalf("expire: %+v %v", r, err)
			}
		},
	}
	cases := []struct {
		state, action, token string
		path                 func(id string) string // nil: /api/orders/<id>/<action>
		status               int
		code                 string
		after                orders.Status
	}{
		{"reserved", "pay", alice, nil, 200, "", orders.Paid},
		{"reserved", "cancel", alice, nil, 200, "", orders.Cancelled},
		{"paid", "pay", alice, nil, 409, "invalid_state", orders.Paid},
		{"paid", "cancel", alice, nil, 409, "invalid_state", orders.Paid},
		{"cancelled", "pay", alice, nil, 409, "invalid_state", orders.Cancelled},
		{"cancelled", "cancel", alice, nil, 409, "invalid_state", orders.Cancelled},
		{"overdue", "pay", alice, nil, 409, "order_expired", orders.Expired},
		{"overdue", "cancel", alice, nil, 409, "invalid_state", orders.Expired},
		{"expired", "pay", alice, nil, 409, "order_expired", orders.Expired},
		{"expired", "cancel", alice, nil, 409, "invalid_state", orders.Expired},
		{"reserved", "pay", bob, nil, 404, "not_found", orders.Reserved},
		{"reserved", "cancel", bob, nil, 404, "not_found", orders.Reserved},
		{"paid", "cancel", bob, nil, 404, "not_found", orders.Paid},
		{"reserved", "pay", "", nil, 401, "unauthorized", orders.Reserved},
		{"reserved", "cancel", "not-a-token", nil, 401, "unauthorized", orders.Reserved},
		{"reserved", "pay", alice, func(string) string { return "/api/orders/nope/pay" }, 404, "not_found", orders.Reserved},
		{"reserved", "cancel", alice, func(id string) string { return "/api/orders/" + id + "x/cancel" }, 404, "not_found", orders.Reserved},
		{"reserved", "pay", alice, func(id string) string { return "/api/orders/" + id + "9/pay" }, 404, "not_found", orders.Reserved},
		{"reserved", "cancel", alice, func(string) string { return "/api/orders/nosuchitem.1/cancel" }, 404, "not_found", orders.Reserved},
	}
	for _, tc := range cases {
		who := map[string]string{alice: "alice", bob: "bob", "": "no token"}[tc.token]
		if who == "" {
			who = "bad token"
		}
		t.Run(tc.state+"/"+tc.action+"/"+who+"/"+strconv.Itoa(tc.status), func(t *testing.T) {
			item, id := buy()
			setups[tc.state](item, id)
			path := "/api/orders/" + id + "/" + tc.action
			if tc.path != nil {
				path = tc.path(id)
			}
			before := a.itemState(item)
			r := a.do("POST", path, tc.token, nil)
			if r.Status != tc.status || r.code() != tc.code {
				t.Fatalf("%s: %d %s, want %d %q", path, r.Status, r.Raw, tc.status, tc.code)
			}
			if tc.status == 200 {
				o, _ := r.Body["order"].(map[string]any)
				keys := make([]string, 0, len(o))
				for k := range o {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				if len(r.Body) != 1 || strings.Join(keys, ",") != "created_at,expires_at,id,item_id,payment_id,payment_status,price_cents,quantity,status,user_id" ||
					o["id"] != id || o["item_id"] != item || o["user_id"] != "alice" || o["quantity"] != 2.0 ||
					o["price_cents"] != 1999.0 || o["status"] != string(tc.after) {
					t.Errorf("body %s", r.Raw)
				}
				if _, err := time.Parse(time.RFC3339, o["expires_at"].(string)); err != nil {
					t.Errorf("expires_at: %v", err)
				}
			}
			g := a.do("GET", "/api/orders/"+id, alice, nil)
			if got := g.Body["order"].(map[string]any)["status"]; got != string(tc.after) {
				t.Errorf("order is %v afterwards, want %s", got, tc.after)
			}
			after := a.itemState(item)
			switch {
			case tc.status == 200 && tc.after == orders.Paid:
				if after.left != before.left || after.paid != before.paid+2 || after.reserved != before.reserved-2 {
					t.Errorf("pay moved stock wrong: %+v -> %+v", before, after)
				}
			case tc.after == orders.Cancelled && tc.status == 200, tc.state == "overdue" && tc.token == alice:
				if after.left != before.left+2 || after.reserved != before.reserved-2 || after.held != 0 {
					t.Errorf("stock or allowance not returned: %+v -> %+v", before, after)
				}
			default:
				if after != before {
					t.Errorf("a refusal changed state: %+v -> %+v", before, after)
				}
			}
		})
	}
}

type lcItemState struct{ left, reserved, paid, held, version int64 }

// itemState reads the item's counters and alice's allowance straight from Redis.
func (a *testAPI) itemState(item string) lcItemState {
	ctx := context.Background()
	k := a.keys.Item(item)
	v := a.rdb.HMGet(ctx, k.Hash(), "stock_left", "reserved", "paid", "version").Val()
	n := func(x any) int64 { s, _ := x.(string); i, _ := strconv.ParseInt(s, 10, 64); return i }
	held, _ := a.rdb.HGet(ctx, k.Held(), "alice").Int64()
	return lcItemState{left: n(v[0]), reserved: n(v[1]), paid: n(v[2]), held: held, version: n(v[3])}
}

// TestMyOrdersCost: GET /api/orders costs at most two round trips and 2 + 2 x orders Redis
// commands whatever the shard count and the catalogue. Counted as the contract counts them (a
// script call is one, whatever it runs) on a private server, for shoppers with 0, 2 and 7 orders among 40 items.
func TestMyOrdersCost(t *testing.T) {
	priv, keys, addr := testenv.PrivateRedis(t)
	a := newTestAPI(t, func(c *config.Config) {
		c.RedisAddrs = []string{addr}
		c.RedisPrefix = keys.Prefix
		c.SnapshotInterval = time.Hour // no refresh of the catalogue among the counted commands
	})
	for i := range 40 {
		a.item("cost-"+strconv.Itoa(i), 100, 10)
	}
	buyers := map[string]int{"none": 0, "two": 2, "seven": 7}
	for user, n := range buyers {
		tok := a.token(user)
		for i := range n {
			// Two of seven's orders share an item: one record read serves both.
			item := "cost-" + strconv.Itoa((i*7)%40)
			if user == "seven" && i == 6 {
				item = "cost-0"
			}
			if r := a.do("POST", "/api/items/"+item+"/purchase", tok, nil); r.Status != http.StatusCreated {
				t.Fatalf("purchase of %s by %s: %d %s", item, user, r.Status, r.Raw)
			}
		}
	}
	for user, n := range buyers {
		tok := a.token(user)
		var r reply
		used := sentDuring(t, priv, func() { r = a.do("GET", "/api/orders", tok, nil) })
		if r.Status != http.StatusOK {
			t.Fatalf("GET /api/orders as %s: %d %s", user, r.Status, r.Raw)
		}
		if listed, _ := r.Body["orders"].([]any); len(listed) != n {
			t.Fatalf("%s has %d orders listed, bought %d: %s", user, len(listed), n, r.Raw)
		}
		t.Logf("GET /api/orders for a shopper with %d orders: %d Redis commands (bound %d)", n, used, 2+2*n)
		if used > 2+2*n {
			t.Errorf("GET /api/orders for %d orders cost %d Redis commands, want at most %d", n, used, 2+2*n)
		}
	}
}

// TestMyOrdersETag: GET /api/orders carries the tag of the caller's order index as its ETag;
// If-None-Match with it answers 304 with no body for at most one Redis command, until an
// order of the caller is made (the purchase path's index write) or changes (its event, as the
// outbox relay applies it).
func TestMyOrdersETag(t *testing.T) {
	priv, keys, addr := testenv.PrivateRedis(t)
	a := newTestAPI(t, func(c *config.Config) {
		c.RedisAddrs = []string{addr}
		c.RedisPrefix = keys.Prefix
		c.SnapshotInterval = time.Hour
	})
	a.item("tag", 10, 10)
	tok := a.token("tina")
	get := func(etag string, want int) reply {
		t.Helper()
		var r reply
		used := sentDuring(t, priv, func() { r = a.do("GET", "/api/orders", tok, nil, "If-None-Match", etag) })
		if r.Status != want || r.Header.Get("ETag") == "" {
			t.Fatalf("GET /api/orders with If-None-Match %s: %d (ETag %q) %s, want %d", etag, r.Status, r.Header.Get("ETag"), r.Raw, want)
		}
		if want == http.StatusNotModified && (r.Raw != "" || used > 1) {
			t.Fatalf("304: body %q for %d Redis commands, want none for at most 1", r.Raw, used)
		}
		return r
	}
	first := get("", http.StatusOK).Header.Get("ETag")
	get(first, http.StatusNotModified)
	get(`W/`+first, http.StatusNotModified)
	get(`"nope"`, http.StatusOK)

	buy := a.do("POST", "/api/items/tag/purchase", tok, nil)
	if buy.Status != http.StatusCreated {
		t.Fatalf("purchase: %d %s", buy.Status, buy.Raw)
	}
	r := get(first, http.StatusOK)
	bought := r.Header.Get("ETag")
	if listed, _ := r.Body["orders"].([]any); bought == first || len(listed) != 1 {
		t.Fatalf("after a purchase: ETag %s (was %s), %s", bought, first, r.Raw)
	}
	get(bought, http.StatusNotModified)

	id, _ := buy.Body["order"].(map[string]any)["id"].(string)
	if c := a.do("POST", "/api/orders/"+id+"/cancel", tok, nil); c.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", c.Status, c.Raw)
	}
	// The relay never runs here: apply the item's events as it does.
	if err := orders.NewIndex(priv, keys).Changed(context.Background(), testenv.StreamEvents(t, priv, keys.Item("tag").Outbox())); err != nil {
		t.Fatal(err)
	}
	r = get(bought, http.StatusOK)
	if o, _ := r.Body["orders"].([]any); len(o) != 1 || o[0].(map[string]any)["status"] != "cancelled" {
		t.Fatalf("after the cancel's event: %s", r.Raw)
	}
}

// sentDuring counts the commands sent to the private server behind priv while f ran, as the
// contract counts them (a script call is one, whatever it runs): INFO commandstats also counts
// what scripts ran, so the HGET and HMGET calls, which only list.lua makes on this path (its
// reads of an item's records), are left out, and so is the INFO that measured.
func sentDuring(t *testing.T, priv redis.UniversalClient, f func()) int {
	t.Helper()
	stats := func() map[string]int {
		info, err := priv.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, m := range cmdstatRe.FindAllStringSubmatch(info, -1) {
			n, _ := strconv.Atoi(m[2])
			out[m[1]] = n
		}
		return out
	}
	before := stats()
	f()
	after := stats()
	n := -1 // the INFO that measured
	for name, calls := range after {
		if name != "hget" && name != "hmget" {
			n += calls - before[name]
		}
	}
	return n
}

var cmdstatRe = regexp.MustCompile(`cmdstat_([a-z|_-]+):calls=(\d+)`)
