package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestStockIdempotencyKey: an admin stock change whose outcome was
// unknown can be retried with its Idempotency-Key and is applied once; the retry gets the same
// reply. A bad key is 400 and changes nothing; another key is another change.
func TestStockIdempotencyKey(t *testing.T) {
	a := newTestAPI(t, nil)
	a.item("lamp", 10, 1)
	stock := func(delta int, key ...string) reply {
		var h []string
		if len(key) > 0 {
			h = []string{"Idempotency-Key", key[0]}
		}
		return a.do("POST", "/api/admin/items/lamp/stock", testAdminToken, map[string]any{"delta": delta}, h...)
	}
	total := func(r reply) float64 {
		it, _ := r.Body["item"].(map[string]any)
		v, _ := it["stock_total"].(float64)
		return v
	}
	first := stock(777, "restock-1")
	if first.Status != http.StatusOK || total(first) != 787 {
		t.Fatalf("first +777: %d %s", first.Status, first.Raw)
	}
	for range 2 {
		again := stock(777, "restock-1")
		if again.Status != http.StatusOK || again.Raw != first.Raw {
			t.Fatalf("retry with the same key: %d %s, want 200 and the first reply %s", again.Status, again.Raw, first.Raw)
		}
	}
	if r := stock(-5, "restock-2"); r.Status != http.StatusOK || total(r) != 782 {
		t.Fatalf("another key: %d %s, want a second change (782)", r.Status, r.Raw)
	}
	for _, bad := range []string{strings.Repeat("k", 65), "tab\there"} {
		if r := stock(1, bad); r.Status != http.StatusBadRequest || r.code() != "invalid_request" {
			t.Errorf("key %q: %d %s, want 400 invalid_request", bad, r.Status, r.Raw)
		}
	}
	if r := stock(1); r.Status != http.StatusOK || total(r) != 783 {
		t.Fatalf("no key: %d %s, want 783", r.Status, r.Raw)
	}
	// A refused change (below zero) is not recorded: the same key may then carry a valid one.
	if r := stock(-10000, "restock-3"); r.Status != http.StatusConflict {
		t.Fatalf("withdrawing too much: %d %s, want 409", r.Status, r.Raw)
	}
	if r := stock(2, "restock-3"); r.Status != http.StatusOK || total(r) != 785 {
		t.Fatalf("the key of a refused change, reused: %d %s, want 785", r.Status, r.Raw)
	}
}
