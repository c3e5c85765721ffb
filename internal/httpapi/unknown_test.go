package httpapi_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestUnknownItemsCostNoRedis: purchases and queue joins of made-up ids are 404, each id costing
// Redis one look-up per UnknownFor at most (counted on a private server); yet items another api
// created a moment ago, unseen by this api's snapshot, all sell at once.
func TestUnknownItemsCostNoRedis(t *testing.T) {
	priv, keys, addr := testenv.PrivateRedis(t)
	a := newTestAPI(t, func(c *config.Config) {
		c.RedisAddrs = []string{addr}
		c.RedisPrefix = keys.Prefix
		c.SnapshotInterval = time.Hour // no refresh of the whole catalogue among the counted commands
	})
	ctx := context.Background()
	a.item("known", 10, 5)
	tok := a.token("flood")
	if r := a.do("POST", "/api/items/known/purchase", tok, nil); r.Status != http.StatusCreated {
		t.Fatalf("purchase of a known item: %d %s", r.Status, r.Raw)
	}

	// Another api imports items; this one has not refreshed its snapshot since.
	other := inventory.NewStore(priv, keys, options.Inventory(inventory.Options{}))
	stock := int64(5)
	var fresh []inventory.Input
	for i := range 100 {
		fresh = append(fresh, inventory.Input{ID: "fresh-" + strconv.Itoa(i), Name: "Fresh", Category: "c", PriceCents: 100, Stock: &stock, PerUserLimit: 2})
	}
	if _, err := other.UpsertMany(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	for _, in := range fresh {
		if r := a.do("POST", "/api/items/"+in.ID+"/purchase", tok, nil); r.Status != http.StatusCreated {
			t.Fatalf("purchase of %s, created a moment ago: %d %s, want 201", in.ID, r.Status, r.Raw)
		}
	}

	before, start := testenv.Commands(t, priv), time.Now()
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
	for range n { // one made-up id, again and again
		if r := a.do("POST", "/api/items/made-up-again/purchase", tok, nil); r.Status != http.StatusNotFound {
			t.Fatalf("purchase of made-up-again: %d %s, want 404", r.Status, r.Raw)
		}
	}
	// One look-up per id and UnknownFor.
	used := testenv.Commands(t, priv) - before - 1 // the INFO that measured
	windows := 1 + int(time.Since(start)/inventory.UnknownFor)
	bound := n + 2*windows // an id whose window ends between its purchase and its join costs one more
	t.Logf("%d purchases and %d joins of %d made-up ids cost %d Redis commands (bound %d)", 2*n, n, n+1, used, bound)
	if used > bound {
		t.Fatalf("%d requests for made-up ids cost %d Redis commands, want at most %d", 3*n, used, bound)
	}
	if got := a.inv.UnknownFromMemory(); got < int64(2*n-windows) {
		t.Fatalf("%d look-ups answered from the negative cache, want at least %d", got, 2*n-windows)
	}
}
