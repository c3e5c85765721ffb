package httpapi_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestMyOrdersCost: GET /api/orders costs at most two round trips and 2 + 2 x orders Redis
// commands whatever the shard count and the catalogue (it cost a look-up in every shard, then
// per item and per order, in three round trips). Counted on a private server (INFO
// commandstats), for shoppers with 0, 2 and 7 orders among 40 items.
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
		before := testenv.Commands(t, priv)
		r := a.do("GET", "/api/orders", tok, nil)
		used := testenv.Commands(t, priv) - before - 1 // the INFO that measured
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
