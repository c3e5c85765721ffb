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
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/testenv"
)

// TestUnknownItemsCostNoRedis is issue 31's finding 4: purchases and waiting-room joins of
// made-up ids are answered 404 from the catalogue snapshot; the ids it lacks are looked up in
// Redis at a bounded rate only, so a flood of them costs Redis next to nothing (counted on a
// private server: INFO commandstats). An item created a moment ago by another api, which this
// api's snapshot has not seen yet, still sells at once.
func TestUnknownItemsCostNoRedis(t *testing.T) {
	priv, keys, addr := testenv.PrivateRedis(t)
	a := newTestAPI(t, func(c *config.Config) {
		c.RedisAddrs = []string{addr}
		c.RedisPrefix = keys.Prefix
	})
	ctx := context.Background()
	a.item("known", 10, 5)
	tok := a.token("flood")
	if r := a.do("POST", "/api/items/known/purchase", tok, nil); r.Status != http.StatusCreated {
		t.Fatalf("purchase of a known item: %d %s", r.Status, r.Raw)
	}

	// Another api creates an item; this one has not refreshed its snapshot since.
	other := inventory.NewStore(priv, keys, inventory.Options{})
	stock := int64(5)
	if _, _, err := other.Upsert(ctx, inventory.Input{ID: "fresh", Name: "Fresh", Category: "c", PriceCents: 100, Stock: &stock, PerUserLimit: 2}); err != nil {
		t.Fatal(err)
	}
	if r := a.do("POST", "/api/items/fresh/purchase", tok, nil); r.Status != http.StatusCreated {
		t.Fatalf("purchase of an item created a moment ago: %d %s, want 201", r.Status, r.Raw)
	}

	before, start := commands(t, priv), time.Now()
	const n = 300
	for i := range n {
		id := "made-up-" + strconv.Itoa(i)
		if r := a.do("POST", "/api/items/"+id+"/purchase", tok, nil); r.Status != http.StatusNotFound || r.code() != "not_found" {
			t.Fatalf("purchase of %s: %d %s, want 404 not_found", id, r.Status, r.Raw)
		}
		if r := a.do("POST", "/api/items/"+id+"/queue", tok, nil); r.Status != http.StatusNotFound || r.code() != "not_found" {
			t.Fatalf("join of %s: %d %s, want 404 not_found", id, r.Status, r.Raw)
		}
	}
	// The bounded look-ups (a burst of 20, then 20 a second) and the snapshot's own refreshes
	// (a few commands every half second), where each request cost 6.5 commands before.
	used := commands(t, priv) - before - 1 // the INFO that measured
	bound := 40 + int(60*time.Since(start).Seconds())
	t.Logf("%d purchases and %d joins of made-up ids cost %d Redis commands (bound %d)", n, n, used, bound)
	if used > bound {
		t.Fatalf("%d requests for made-up ids cost %d Redis commands, want at most %d", 2*n, used, bound)
	}
}

var callsRe = regexp.MustCompile(`calls=(\d+)`)

// commands is how many commands the server has executed in all (INFO commandstats).
func commands(t *testing.T, rdb redis.UniversalClient) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range callsRe.FindAllStringSubmatch(info, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}
