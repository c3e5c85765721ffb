package httpapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/httpapi"
)

// TestPurchasePathContract checks every status and code of the purchase-path endpoints.
func TestPurchasePathContract(t *testing.T) {
	a := newTestAPI(t, nil)
	a.item("phone", 10, 9)
	alice := a.token("alice")
	bob := a.token("bob")
	expired, _, _ := httpapi.NewAuth("test-secret", testAdminToken, -time.Hour).Mint("alice")
	forged, _, _ := httpapi.NewAuth("another-secret", testAdminToken, time.Hour).Mint("alice")
	const noneAlg = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJhbGljZSIsImV4cCI6NDEwMjQ0NDgwMH0."
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	longAgo := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)
	a.do("PUT", "/api/admin/items/later", testAdminToken, map[string]any{"name": "Later", "price_cents": 1, "stock": 1, "per_user_limit": 1, "starts_at": future})
	// A sale that ended an hour ago: created to end in the future, its end then moved back in
	// Redis (as time passing would), and written again unchanged (a past end may stay).
	gone := map[string]any{"name": "Gone", "price_cents": 1, "stock": 1, "per_user_limit": 1, "starts_at": longAgo, "ends_at": future}
	a.do("PUT", "/api/admin/items/gone", testAdminToken, gone)
	pastT, _ := time.Parse(time.RFC3339, past)
	a.rdb.HSet(context.Background(), a.keys.Item("gone").Hash(), "ends_at", pastT.UnixMilli())
	gone["ends_at"] = past
	if r := a.do("PUT", "/api/admin/items/gone", testAdminToken, gone); r.Status != 200 {
		t.Fatalf("an unchanged past ends_at: %d %s", r.Status, r.Raw)
	}
	var aliceOrder string

	cases := []struct {
		name, method, path, token string
		body                      any
		headers                   []string
		status                    int
		code                      string
		check                     func(t *testing.T, r reply)
	}{
		// Health.
		{name: "healthz", method: "GET", path: "/healthz", status: 200},
		{name: "readyz", method: "GET", path: "/readyz", status: 200},
		{name: "unknown route", method: "GET", path: "/api/nope", status: 404, code: "not_found"},
		// Login.
		{name: "login", method: "POST", path: "/api/login", body: `{"user":"carol"}`, status: 200, check: func(t *testing.T, r reply) {
			if r.Body["user"] != "carol" || r.Body["token"] == "" || r.Body["expires_at"] == nil {
				t.Errorf("login body %s", r.Raw)
			}
		}},
		{name: "login bad user", method: "POST", path: "/api/login", body: `{"user":"a b"}`, status: 400, code: "invalid_request"},
		{name: "login empty user", method: "POST", path: "/api/login", body: `{"user":""}`, status: 400, code: "invalid_request"},
		{name: "login unknown field", method: "POST", path: "/api/login", body: `{"user":"x","admin":true}`, status: 400, code: "invalid_request"},
		{name: "login bad JSON", method: "POST", path: "/api/login", body: `{"user":`, status: 400, code: "invalid_request"},
		{name: "login stray closing brace", method: "POST", path: "/api/login", body: `{"user":"carol"}}`, status: 400, code: "invalid_request"},
		{name: "login name in another case", method: "POST", path: "/api/login", body: `{"User":"carol"}`, status: 400, code: "invalid_request"},
		{name: "login too large", method: "POST", path: "/api/login", body: `{"user":"` + strings.Repeat("a", 70<<10) + `"}`, status: 413, code: "too_large"},
		// Catalogue.
		{name: "items", method: "GET", path: "/api/items", status: 200, check: func(t *testing.T, r reply) {
			if items, _ := r.Body["items"].([]any); len(items) != 3 {
				t.Errorf("want 3 items: %s", r.Raw)
			}
		}},
		{name: "item", method: "GET", path: "/api/items/phone", status: 200, check: func(t *testing.T, r reply) {
			it := r.Body["item"].(map[string]any)
			for _, f := range []string{"id", "name", "category", "price_cents", "stock_total", "stock_left", "per_user_limit", "starts_at", "ends_at", "status"} {
				if _, ok := it[f]; !ok {
					t.Errorf("item lacks %s: %s", f, r.Raw)
				}
			}
			if it["status"] != "live" || it["stock_left"] != 10.0 {
				t.Errorf("item %s", r.Raw)
			}
		}},
		{name: "item upcoming", method: "GET", path: "/api/items/later", status: 200, check: func(t *testing.T, r reply) {
			if r.Body["item"].(map[string]any)["status"] != "upcoming" {
				t.Errorf("status: %s", r.Raw)
			}
		}},
		{name: "item ended", method: "GET", path: "/api/items/gone", status: 200, check: func(t *testing.T, r reply) {
			if r.Body["item"].(map[string]any)["status"] != "ended" {
				t.Errorf("status: %s", r.Raw)
			}
		}},
		{name: "unknown item", method: "GET", path: "/api/items/nope", status: 404, code: "not_found"},
		{name: "item id of 65 characters", method: "GET", path: "/api/items/" + strings.Repeat("x", 65), status: 400, code: "invalid_request"},
		{name: "item id of 64 characters, unknown", method: "GET", path: "/api/items/" + strings.Repeat("x", 64), status: 404, code: "not_found"},
		{name: "item id with a space", method: "GET", path: "/api/items/a%20b", status: 400, code: "invalid_request"},
		{name: "purchase of a 65-character item id", method: "POST", path: "/api/items/" + strings.Repeat("x", 65) + "/purchase", token: alice, body: `{}`, status: 400, code: "invalid_request"},
		{name: "rating of a 65-character item id", method: "POST", path: "/api/items/" + strings.Repeat("x", 65) + "/rating", token: alice, body: `{"stars":5}`, status: 400, code: "invalid_request"},
		{name: "stock of a 65-character item id", method: "POST", path: "/api/admin/items/" + strings.Repeat("x", 65) + "/stock", token: testAdminToken, body: `{"delta":1}`, status: 400, code: "invalid_request"},
		{name: "put of a 65-character item id", method: "PUT", path: "/api/admin/items/" + strings.Repeat("x", 65), token: testAdminToken, body: `{}`, status: 400, code: "invalid_request"},
		// Tokens.
		{name: "purchase without token", method: "POST", path: "/api/items/phone/purchase", body: `{}`, status: 401, code: "unauthorized"},
		{name: "purchase malformed token", method: "POST", path: "/api/items/phone/purchase", token: "garbage", body: `{}`, status: 401, code: "unauthorized"},
		{name: "purchase expired token", method: "POST", path: "/api/items/phone/purchase", token: expired, body: `{}`, status: 401, code: "unauthorized"},
		{name: "purchase forged token", method: "POST", path: "/api/items/phone/purchase", token: forged, body: `{}`, status: 401, code: "unauthorized"},
		{name: "purchase alg none", method: "POST", path: "/api/items/phone/purchase", token: noneAlg, body: `{}`, status: 401, code: "unauthorized"},
		{name: "purchase with admin token", method: "POST", path: "/api/items/phone/purchase", token: testAdminToken, body: `{}`, status: 401, code: "unauthorized"},
		{name: "shopper on admin route", method: "PUT", path: "/api/admin/items/x", token: alice, body: `{}`, status: 403, code: "forbidden"},
		{name: "no token on admin route", method: "POST", path: "/api/admin/items/phone/stock", body: `{"delta":1}`, status: 401, code: "unauthorized"},
		{name: "bad token on admin route", method: "POST", path: "/api/admin/items/phone/stock", token: "nope", body: `{"delta":1}`, status: 401, code: "unauthorized"},
		// Purchase.
		{name: "purchase quantity 0", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":0}`, status: 400, code: "invalid_request"},
		{name: "purchase quantity negative", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":-2}`, status: 400, code: "invalid_request"},
		{name: "purchase quantity huge", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":1e30}`, status: 400, code: "invalid_request"},
		{name: "purchase quantity over the bound", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":1000000001}`, status: 400, code: "invalid_request", check: func(t *testing.T, r reply) {
			// The message names the range, not just its lower end.
			if msg := r.Body["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "1000000000") {
				t.Errorf("message %q does not say the bound", msg)
			}
		}},
		{name: "purchase quantity fraction", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":1.5}`, status: 400, code: "invalid_request"},
		{name: "purchase quantity string", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":"2"}`, status: 400, code: "invalid_request"},
		{name: "purchase unknown field", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":1,"price":0}`, status: 400, code: "invalid_request"},
		// JSON names are case-sensitive: encoding/json alone would buy 2 here.
		{name: "purchase Quantity", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"Quantity":2}`, status: 400, code: "invalid_request"},
		{name: "purchase QUANTITY", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"QUANTITY":1}`, status: 400, code: "invalid_request"},
		{name: "purchase quantity and Quantity", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":1,"Quantity":2}`, status: 400, code: "invalid_request"},
		// A name twice: encoding/json alone would buy the last one's 5.
		{name: "purchase quantity twice", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":1,"quantity":5}`, status: 400, code: "invalid_request"},
		{name: "purchase quantity twice, once escaped", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":1,"quantit\u0079":5}`, status: 400, code: "invalid_request"},
		{name: "purchase bad JSON", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":`, status: 400, code: "invalid_request"},
		{name: "purchase trailing data", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":1} {}`, status: 400, code: "invalid_request"},
		{name: "purchase stray closing brace", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":1}}`, status: 400, code: "invalid_request"},
		{name: "purchase stray closing bracket", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":1} ]`, status: 400, code: "invalid_request"},
		{name: "purchase empty object, stray brace", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{}}`, status: 400, code: "invalid_request"},
		{name: "purchase bad idempotency key", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{}`, headers: []string{"Idempotency-Key", strings.Repeat("k", 65)}, status: 400, code: "invalid_request"},
		{name: "purchase unknown item", method: "POST", path: "/api/items/nope/purchase", token: alice, body: `{}`, status: 404, code: "not_found"},
		{name: "purchase not started", method: "POST", path: "/api/items/later/purchase", token: alice, body: `{}`, status: 409, code: "sale_not_started"},
		{name: "purchase ended", method: "POST", path: "/api/items/gone/purchase", token: alice, body: `{}`, status: 409, code: "sale_ended"},
		{name: "purchase over limit", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":10}`, status: 409, code: "limit_exceeded"},
		{name: "purchase 9 of 10", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":9}`, headers: []string{"Idempotency-Key", "k1"}, status: 201, check: func(t *testing.T, r reply) {
			o := r.Body["order"].(map[string]any)
			aliceOrder, _ = o["id"].(string)
			for _, f := range []string{"id", "item_id", "user_id", "quantity", "price_cents", "status", "created_at", "expires_at"} {
				if _, ok := o[f]; !ok {
					t.Errorf("order lacks %s: %s", f, r.Raw)
				}
			}
			if o["status"] != "reserved" || o["quantity"] != 9.0 || o["user_id"] != "alice" || o["price_cents"] != 1999.0 {
				t.Errorf("order %s", r.Raw)
			}
		}},
		{name: "purchase replay", method: "POST", path: "/api/items/phone/purchase", token: alice, body: `{"quantity":9}`, headers: []string{"Idempotency-Key", "k1"}, status: 200, check: func(t *testing.T, r reply) {
			if r.Body["order"].(map[string]any)["id"] != aliceOrder {
				t.Errorf("replay returned another order: %s", r.Raw)
			}
		}},
		{name: "purchase sold out", method: "POST", path: "/api/items/phone/purchase", token: bob, body: `{"quantity":2}`, status: 409, code: "sold_out"},
		{name: "purchase empty body = 1", method: "POST", path: "/api/items/phone/purchase", token: bob, status: 201},
		// Orders.
		{name: "my orders", method: "GET", path: "/api/orders", token: alice, status: 200, check: func(t *testing.T, r reply) {
			if list, _ := r.Body["orders"].([]any); len(list) != 1 {
				t.Errorf("alice's orders: %s", r.Raw)
			}
		}},
		{name: "no orders", method: "GET", path: "/api/orders", token: a.token("nobody"), status: 200, check: func(t *testing.T, r reply) {
			if list, ok := r.Body["orders"].([]any); !ok || len(list) != 0 {
				t.Errorf("want an empty list: %s", r.Raw)
			}
		}},
		{name: "orders without token", method: "GET", path: "/api/orders", status: 401, code: "unauthorized"},
		{name: "order detail", method: "GET", path: "/api/orders/phone.1", token: alice, status: 200},
		{name: "another user's order", method: "GET", path: "/api/orders/phone.1", token: bob, status: 404, code: "not_found"},
		{name: "unknown order", method: "GET", path: "/api/orders/phone.999", token: alice, status: 404, code: "not_found"},
		{name: "malformed order id", method: "GET", path: "/api/orders/zzz", token: alice, status: 404, code: "not_found"},
		// Admin: items.
		{name: "create item", method: "PUT", path: "/api/admin/items/tv", token: testAdminToken, body: map[string]any{"name": "TV", "category": "screens", "price_cents": 50000, "stock": 5, "per_user_limit": 2, "starts_at": longAgo, "ends_at": future}, status: 201},
		{name: "update item", method: "PUT", path: "/api/admin/items/tv", token: testAdminToken, body: map[string]any{"name": "Big TV", "category": "screens", "price_cents": 45000, "stock": 5, "per_user_limit": 2}, status: 200, check: func(t *testing.T, r reply) {
			if it := r.Body["item"].(map[string]any); it["name"] != "Big TV" || it["stock_total"] != 5.0 {
				t.Errorf("update: %s", r.Raw)
			}
		}},
		{name: "update without stock keeps it", method: "PUT", path: "/api/admin/items/tv", token: testAdminToken, body: map[string]any{"name": "TV", "price_cents": 45000, "per_user_limit": 2}, status: 200},
		{name: "update changing stock", method: "PUT", path: "/api/admin/items/tv", token: testAdminToken, body: map[string]any{"name": "TV", "price_cents": 1, "stock": 6, "per_user_limit": 2}, status: 409, code: "invalid_state"},
		{name: "item per_user_limit 0", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: map[string]any{"name": "X", "price_cents": 1, "stock": 1, "per_user_limit": 0}, status: 400, code: "invalid_request"},
		{name: "item negative stock", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: map[string]any{"name": "X", "price_cents": 1, "stock": -1, "per_user_limit": 1}, status: 400, code: "invalid_request"},
		{name: "item negative price", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: map[string]any{"name": "X", "price_cents": -1, "stock": 1, "per_user_limit": 1}, status: 400, code: "invalid_request"},
		{name: "item without name", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: map[string]any{"price_cents": 1, "stock": 1, "per_user_limit": 1}, status: 400, code: "invalid_request"},
		{name: "item ends before start", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: map[string]any{"name": "X", "price_cents": 1, "stock": 1, "per_user_limit": 1, "starts_at": future, "ends_at": past}, status: 400, code: "invalid_request"},
		{name: "item bad time", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: map[string]any{"name": "X", "price_cents": 1, "stock": 1, "per_user_limit": 1, "starts_at": "tomorrow"}, status: 400, code: "invalid_request"},
		{name: "item NUL in name", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: map[string]any{"name": "a\u0000b", "price_cents": 1, "stock": 1, "per_user_limit": 1}, status: 400, code: "invalid_request"},
		{name: "item newline in name", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: map[string]any{"name": "a\nb", "price_cents": 1, "stock": 1, "per_user_limit": 1}, status: 400, code: "invalid_request"},
		{name: "item C1 control in category", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: map[string]any{"name": "X", "category": "a\u0085b", "price_cents": 1, "stock": 1, "per_user_limit": 1}, status: 400, code: "invalid_request"},
		{name: "item name not UTF-8", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: "{\"name\":\"a\xffb\",\"price_cents\":1,\"stock\":1,\"per_user_limit\":1}", status: 400, code: "invalid_request"},
		{name: "item tab in category", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: `{"name":"X","category":"a\tb","price_cents":1,"stock":1,"per_user_limit":1}`, status: 400, code: "invalid_request"},
		{name: "item bad id", method: "PUT", path: "/api/admin/items/bad$id", token: testAdminToken, body: map[string]any{"name": "X", "price_cents": 1, "stock": 1, "per_user_limit": 1}, status: 400, code: "invalid_request"},
		{name: "item unknown field", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: map[string]any{"name": "X", "price_cents": 1, "stock": 1, "per_user_limit": 1, "colour": "red"}, status: 400, code: "invalid_request"},
		{name: "item Name", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: `{"Name":"X","price_cents":1,"stock":1,"per_user_limit":1}`, status: 400, code: "invalid_request"},
		{name: "item PRICE_CENTS", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: `{"name":"X","PRICE_CENTS":1,"stock":1,"per_user_limit":1}`, status: 400, code: "invalid_request"},
		{name: "item Queue", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: `{"name":"X","price_cents":1,"stock":1,"per_user_limit":1,"Queue":{"admit_per_second":5,"max_active":5,"pass_ttl_seconds":60}}`, status: 400, code: "invalid_request"},
		{name: "item queue Max_active", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: `{"name":"X","price_cents":1,"stock":1,"per_user_limit":1,"queue":{"admit_per_second":5,"Max_active":5,"pass_ttl_seconds":60}}`, status: 400, code: "invalid_request"},
		{name: "item stock twice", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: `{"name":"X","price_cents":1,"stock":1,"stock":900,"per_user_limit":1}`, status: 400, code: "invalid_request"},
		{name: "item queue max_active twice", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: `{"name":"X","price_cents":1,"stock":1,"per_user_limit":1,"queue":{"admit_per_second":5,"max_active":5,"max_active":50,"pass_ttl_seconds":60}}`, status: 400, code: "invalid_request"},
		{name: "item id mismatch", method: "PUT", path: "/api/admin/items/x1", token: testAdminToken, body: map[string]any{"id": "x2", "name": "X", "price_cents": 1, "stock": 1, "per_user_limit": 1}, status: 400, code: "invalid_request"},
		// Admin: stock.
		{name: "restock", method: "POST", path: "/api/admin/items/phone/stock", token: testAdminToken, body: `{"delta":5}`, status: 200, check: func(t *testing.T, r reply) {
			if it := r.Body["item"].(map[string]any); it["stock_total"] != 15.0 || it["stock_left"] != 5.0 {
				t.Errorf("restock: %s", r.Raw)
			}
		}},
		{name: "withdraw", method: "POST", path: "/api/admin/items/phone/stock", token: testAdminToken, body: `{"delta":-2}`, status: 200},
		{name: "withdraw below zero", method: "POST", path: "/api/admin/items/phone/stock", token: testAdminToken, body: `{"delta":-4}`, status: 409, code: "invalid_state"},
		{name: "delta zero", method: "POST", path: "/api/admin/items/phone/stock", token: testAdminToken, body: `{"delta":0}`, status: 400, code: "invalid_request"},
		{name: "delta missing", method: "POST", path: "/api/admin/items/phone/stock", token: testAdminToken, body: `{}`, status: 400, code: "invalid_request"},
		{name: "delta fraction", method: "POST", path: "/api/admin/items/phone/stock", token: testAdminToken, body: `{"delta":1.5}`, status: 400, code: "invalid_request"},
		{name: "delta in another case", method: "POST", path: "/api/admin/items/phone/stock", token: testAdminToken, body: `{"Delta":5}`, status: 400, code: "invalid_request"},
		{name: "update with a wrongly cased queue name", method: "PUT", path: "/api/admin/items/phone", token: testAdminToken, body: `{"name":"Item phone","category":"phones","price_cents":1,"per_user_limit":9,"queue":{"ADMIT_PER_SECOND":5,"max_active":5,"pass_ttl_seconds":60}}`, status: 400, code: "invalid_request"},
		{name: "update with a wrongly cased name", method: "PUT", path: "/api/admin/items/phone", token: testAdminToken, body: `{"name":"Item phone","Category":"tablets","price_cents":1999,"per_user_limit":9}`, status: 400, code: "invalid_request"},
		{name: "stock of unknown item", method: "POST", path: "/api/admin/items/nope/stock", token: testAdminToken, body: `{"delta":1}`, status: 404, code: "not_found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := a.do(tc.method, tc.path, tc.token, tc.body, tc.headers...)
			if r.Status != tc.status || r.code() != tc.code {
				t.Fatalf("got %d %q, want %d %q: %s", r.Status, r.code(), tc.status, tc.code, r.Raw)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}

	// Bad input changed nothing: phone has 15 loaded, 2 withdrawn, 10 reserved.
	it, err := a.inv.Get(t.Context(), "phone")
	if err != nil || it.StockTotal != 13 || it.StockLeft != 3 || it.Reserved != 10 ||
		it.PriceCents != 1999 || it.Category != "phones" || it.Queue != nil {
		t.Fatalf("phone after the table: %+v %v", it, err)
	}
	if _, err := a.inv.Get(t.Context(), "x1"); err == nil {
		t.Fatalf("a refused PUT created x1")
	}
}
