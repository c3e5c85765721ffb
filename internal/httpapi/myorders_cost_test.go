package httpapi_test

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

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
