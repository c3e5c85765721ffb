package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// An admin PUT whose ends_at is in the past is 400 with a message naming ends_at, on create and
// when it changes; nothing is created or changed.
func TestPutPastEndRefused(t *testing.T) {
	a := newTestAPI(t, nil)
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	body := map[string]any{"name": "Late", "price_cents": 1, "stock": 1, "per_user_limit": 1, "ends_at": past}
	r := a.do("PUT", "/api/admin/items/late", testAdminToken, body)
	msg, _ := r.Body["error"].(map[string]any)["message"].(string)
	if r.Status != http.StatusBadRequest || r.code() != "invalid_request" || !strings.Contains(msg, "ends_at is in the past") {
		t.Fatalf("create ending in the past: %d %s", r.Status, r.Raw)
	}
	if r := a.do("GET", "/api/items/late", "", nil); r.Status != http.StatusNotFound {
		t.Fatalf("the refused create made the item: %d %s", r.Status, r.Raw)
	}
	body["ends_at"] = time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if r := a.do("PUT", "/api/admin/items/late", testAdminToken, body); r.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.Status, r.Raw)
	}
	body["ends_at"], body["name"] = past, "Later"
	if r := a.do("PUT", "/api/admin/items/late", testAdminToken, body); r.Status != http.StatusBadRequest {
		t.Fatalf("moving the end into the past: %d %s", r.Status, r.Raw)
	}
}
