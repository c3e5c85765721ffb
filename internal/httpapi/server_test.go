package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// /readyz tells the public one word; the cause (an address, a server error) goes to the log.
func TestReadyzHidesItsCause(t *testing.T) {
	s := bareServer(t, func(context.Context) error { return errors.New("dial tcp 10.1.2.3:6379: refused") })
	w := serve(s, "GET", "/readyz", nil)
	if w.Code != http.StatusServiceUnavailable || strings.Contains(w.Body.String(), "10.1.2.3") {
		t.Fatalf("readyz answered %d %s", w.Code, w.Body.String())
	}
}

// Replies that belong to one shopper or admin (orders, tickets carrying passes, admin
// data, a login's token) carry Cache-Control: no-store, so no shared cache or browser keeps
// them; the public catalogue keeps its public caching.
func TestPersonalRepliesNoStore(t *testing.T) {
	a := newTestAPI(t, nil)
	a.item("phone", 10, 5)
	a.queuedItem("wr", 5, 60)
	tok := a.token("alice")
	buy := a.do("POST", "/api/items/phone/purchase", tok, map[string]any{"quantity": 1})
	order, _ := buy.Body["order"].(map[string]any)
	id, _ := order["id"].(string)
	buy2 := a.do("POST", "/api/items/phone/purchase", tok, map[string]any{"quantity": 1})
	id2, _ := buy2.Body["order"].(map[string]any)["id"].(string)
	personal := []struct {
		name               string
		reply              reply
		wantStatusAtLeast2 int
	}{
		{"login", a.do("POST", "/api/login", "", map[string]any{"user": "bob"}), 200},
		{"purchase", buy, 201},
		{"purchase refused", a.do("POST", "/api/items/phone/purchase", tok, map[string]any{"quantity": 99}), 409},
		{"orders", a.do("GET", "/api/orders", tok, nil), 200},
		{"order", a.do("GET", "/api/orders/"+id, tok, nil), 200},
		{"pay", a.do("POST", "/api/orders/"+id+"/pay", tok, nil), 200},
		{"cancel", a.do("POST", "/api/orders/"+id2+"/cancel", tok, nil), 200},
		{"queue join", a.do("POST", "/api/items/wr/queue", tok, nil), 200},
		{"queue poll", a.do("GET", "/api/items/wr/queue", tok, nil), 200},
		{"admin put", a.do("PUT", "/api/admin/items/tv", testAdminToken, map[string]any{"name": "TV", "category": "tv", "price_cents": 1, "stock": 1, "per_user_limit": 1}), 201},
		{"admin stock", a.do("POST", "/api/admin/items/tv/stock", testAdminToken, map[string]any{"delta": 1}), 200},
		{"admin import", a.do("POST", "/api/admin/items/import", testAdminToken, "[]"), 200},
		{"admin queue", a.do("GET", "/api/admin/items/wr/queue", testAdminToken, nil), 200},
		{"admin stats", a.do("GET", "/api/admin/stats", testAdminToken, nil), 0},
		{"admin reconciliation", a.do("GET", "/api/admin/reconciliation", testAdminToken, nil), 0},
	}
	for _, p := range personal {
		if p.wantStatusAtLeast2 != 0 && p.reply.Status != p.wantStatusAtLeast2 {
			t.Errorf("%s: %d %s, want %d", p.name, p.reply.Status, p.reply.Raw, p.wantStatusAtLeast2)
		}
		if got := p.reply.Header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s: Cache-Control %q, want no-store", p.name, got)
		}
	}
	if got := a.do("GET", "/api/items", "", nil).Header.Get("Cache-Control"); got != "public, max-age=1" {
		t.Errorf("GET /api/items: Cache-Control %q, want the public caching", got)
	}
}
