package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestPurchaseNotAdmitted: a purchase the inventory's Admit refuses (inventory.ErrNotAdmitted:
// the outbox over its bound) is 503 unavailable with the refusal's message.
func TestPurchaseNotAdmitted(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	cfg, err := config.Parse(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	refusal := errors.New("the event outbox is over its bound; nothing was changed, try again later")
	inv := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{Admit: func() error { return refusal }}))
	stock := int64(5)
	if _, _, err := inv.Upsert(context.Background(), inventory.Input{ID: "phone", Name: "Phone", Category: "phones", PriceCents: 1, Stock: &stock, PerUserLimit: 2}); err != nil {
		t.Fatal(err)
	}
	auth := httpapi.NewAuth("admit-test-secret", "admit-test-admin", cfg.TokenTTL)
	srv := httpapi.New(httpapi.Deps{Options: app.HTTPOptions(cfg), Auth: auth, Inventory: inv, Orders: orders.NewStore(rdb, keys)})
	tok, _, err := auth.Mint("alice")
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/api/items/phone/purchase", bytes.NewBufferString(`{"quantity":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	var body struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	if rec.Code != http.StatusServiceUnavailable || body.Error.Code != "unavailable" || body.Error.Message != refusal.Error() {
		t.Fatalf("purchase refused by Admit: %d %s, want 503 unavailable with the refusal's message", rec.Code, rec.Body.String())
	}
}

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
