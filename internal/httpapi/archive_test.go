package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestArchiveItem is the archive route's contract: 200 archived (again 200); then purchases 409
// sale_ended, gone from the list, ended in GET, archived in the admin list, writes refused
// invalid_state, an open reservation still paid, a queue ticket sold_out; 404, 401 and 403.
func TestArchiveItem(t *testing.T) {
	a := newTestAPI(t, nil)
	a.item("lamp", 10, 5)
	a.item("desk", 10, 5)
	a.queuedItem("tv", 10, 60)
	alice := a.token("alice")
	open := a.do("POST", "/api/items/lamp/purchase", alice, map[string]any{"quantity": 1})
	if open.Status != http.StatusCreated {
		t.Fatalf("purchase before the archive: %d %s", open.Status, open.Raw)
	}
	orderID := open.Body["order"].(map[string]any)["id"].(string)
	a.admitted("tv", "bob")

	for _, c := range []struct {
		token, path string
		status      int
	}{
		{"", "/api/admin/items/lamp/archive", http.StatusUnauthorized},
		{alice, "/api/admin/items/lamp/archive", http.StatusForbidden},
		{testAdminToken, "/api/admin/items/nope/archive", http.StatusNotFound},
		{testAdminToken, "/api/admin/items/bad%20id/archive", http.StatusBadRequest},
	} {
		if r := a.do("POST", c.path, c.token, nil); r.Status != c.status {
			t.Errorf("POST %s: %d %s, want %d", c.path, r.Status, r.Raw, c.status)
		}
	}
	for _, id := range []string{"lamp", "lamp", "tv"} { // the second time: 200 again
		r := a.do("POST", "/api/admin/items/"+id+"/archive", testAdminToken, nil)
		if r.Status != http.StatusOK || r.Body["item"].(map[string]any)["status"] != "archived" {
			t.Fatalf("archive %s: %d %s", id, r.Status, r.Raw)
		}
	}

	if r := a.do("POST", "/api/items/lamp/purchase", alice, map[string]any{"quantity": 1}); r.Status != http.StatusConflict || r.code() != "sale_ended" {
		t.Errorf("purchase of an archived item: %d %s, want 409 sale_ended", r.Status, r.Raw)
	}
	if r := a.do("GET", "/api/items", "", nil); strings.Contains(r.Raw, `"lamp"`) || !strings.Contains(r.Raw, `"desk"`) {
		t.Errorf("GET /api/items still lists the archived item (or lost the other): %s", r.Raw)
	}
	if r := a.do("GET", "/api/items/lamp", "", nil); r.Status != http.StatusOK || r.Body["item"].(map[string]any)["status"] != "ended" {
		t.Errorf("GET /api/items/lamp: %d %s, want 200 status ended", r.Status, r.Raw)
	}
	statuses := map[string]any{}
	r := a.do("GET", "/api/admin/items", testAdminToken, nil)
	for _, it := range r.Body["items"].([]any) {
		m := it.(map[string]any)
		statuses[m["id"].(string)] = m["status"]
	}
	if statuses["lamp"] != "archived" || statuses["desk"] != "live" || statuses["tv"] != "archived" {
		t.Errorf("GET /api/admin/items: %v, want lamp and tv archived, desk live", statuses)
	}
	if r := a.do("GET", "/api/admin/items", alice, nil); r.Status != http.StatusForbidden {
		t.Errorf("GET /api/admin/items with a shopper token: %d", r.Status)
	}

	put := a.do("PUT", "/api/admin/items/lamp", testAdminToken, map[string]any{"name": "Lamp", "price_cents": 1999, "per_user_limit": 5})
	if put.Status != http.StatusConflict || put.code() != "invalid_state" || !strings.Contains(put.Raw, "archived") {
		t.Errorf("PUT of an archived item: %d %s, want 409 invalid_state naming the archive", put.Status, put.Raw)
	}
	if r := a.do("POST", "/api/admin/items/lamp/stock", testAdminToken, map[string]any{"delta": 5}); r.Status != http.StatusConflict || r.code() != "invalid_state" {
		t.Errorf("stock change of an archived item: %d %s, want 409 invalid_state", r.Status, r.Raw)
	}
	imp := a.do("POST", "/api/admin/items/import", testAdminToken,
		"id,name,category,price_cents,stock,per_user_limit,starts_at,ends_at\nlamp,Lamp,c,1999,,5,,\ndesk,Desk,c,1999,,5,,\n",
		"Content-Type", "text/csv")
	if imp.Status != http.StatusOK || imp.Body["updated"] != float64(1) || !strings.Contains(imp.Raw, `"line":2`) || !strings.Contains(imp.Raw, "archived") {
		t.Errorf("import naming an archived item: %d %s, want its row refused and the other loaded", imp.Status, imp.Raw)
	}

	// The reservation made before the archive runs its course: it can still be paid.
	if r := a.do("POST", "/api/orders/"+orderID+"/pay", alice, nil); r.Status != http.StatusOK || r.Body["order"].(map[string]any)["status"] != "paid" {
		t.Errorf("pay an order of an archived item: %d %s", r.Status, r.Raw)
	}
	// The waiting room's admitted shopper is told it sold out.
	bob := a.token("bob")
	deadline := time.Now().Add(10 * time.Second)
	for {
		a.q.Tick(context.Background())
		r := a.do("GET", "/api/items/tv/queue", bob, nil)
		if tk, ok := r.Body["ticket"].(map[string]any); ok && tk["state"] == "sold_out" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ticket of an archived item: %s, want sold_out", r.Raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := a.do("POST", "/api/items/tv/queue", a.token("carol"), nil); r.Status != http.StatusConflict || r.code() != "sale_ended" {
		t.Errorf("joining the waiting room of an archived item: %d %s, want 409 sale_ended", r.Status, r.Raw)
	}
}
