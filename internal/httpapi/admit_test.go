package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

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
