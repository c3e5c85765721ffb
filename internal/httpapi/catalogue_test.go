package httpapi_test

import (
	"net/http"
	"testing"
	"time"
)

// The catalogue replies are encoded once per snapshot and reused: a write through this
// instance shows at once, a sale that starts shows when it starts (not when the snapshot
// changes), and unknown ids stay 404.
func TestCatalogueRepliesFollowWritesAndTime(t *testing.T) {
	a := newTestAPI(t, nil)
	a.item("phone", 5, 2)
	start := time.Now().Add(1500 * time.Millisecond).UTC().Truncate(time.Second).Add(time.Second)
	if r := a.do("PUT", "/api/admin/items/later", testAdminToken, map[string]any{
		"name": "Later", "price_cents": 100, "stock": 3, "per_user_limit": 1,
		"starts_at": start.Format(time.RFC3339),
	}); r.Status != http.StatusCreated {
		t.Fatalf("PUT later: %d %s", r.Status, r.Raw)
	}
	status := func(id string) string {
		r := a.do("GET", "/api/items/"+id, "", nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", id, r.Status, r.Raw)
		}
		return r.Body["item"].(map[string]any)["status"].(string)
	}
	if got := status("later"); got != "upcoming" {
		t.Fatalf("before the start: %s, want upcoming", got)
	}
	list := a.do("GET", "/api/items", "", nil)
	if n := len(list.Body["items"].([]any)); list.Status != http.StatusOK || n != 2 {
		t.Fatalf("GET /api/items: %d, %d items", list.Status, n)
	}
	// A restock through this instance shows in the next read.
	if r := a.do("POST", "/api/admin/items/phone/stock", testAdminToken, map[string]any{"delta": 7}); r.Status != http.StatusOK {
		t.Fatalf("restock: %d %s", r.Status, r.Raw)
	}
	r := a.do("GET", "/api/items/phone", "", nil)
	if left := r.Body["item"].(map[string]any)["stock_left"].(float64); left != 12 {
		t.Fatalf("stock_left after restock = %v, want 12", left)
	}
	if r := a.do("GET", "/api/items/nope", "", nil); r.Status != http.StatusNotFound || r.code() != "not_found" {
		t.Fatalf("unknown item: %d %s", r.Status, r.Raw)
	}
	time.Sleep(time.Until(start) + 50*time.Millisecond)
	if got := status("later"); got != "live" {
		t.Fatalf("after the start: %s, want live", got)
	}
}

// GET /api/items carries an ETag of the encoded catalogue and a one-second public cache
// life; a client holding the current tag (alone, weak, in a list, or "*") gets 304 without
// a body, a stale tag gets the new catalogue, and the tag follows the content, not the time.
func TestCatalogueETag(t *testing.T) {
	a := newTestAPI(t, nil)
	a.item("phone", 5, 2)
	r := a.do("GET", "/api/items", "", nil)
	tag := r.Header.Get("ETag")
	if r.Status != http.StatusOK || len(tag) < 3 || tag[0] != '"' || r.Header.Get("Cache-Control") != "public, max-age=1" {
		t.Fatalf("GET /api/items: %d ETag %q Cache-Control %q", r.Status, tag, r.Header.Get("Cache-Control"))
	}
	for _, inm := range []string{tag, "W/" + tag, `"other", ` + tag, "*"} {
		r := a.do("GET", "/api/items", "", nil, "If-None-Match", inm)
		if r.Status != http.StatusNotModified || r.Raw != "" || r.Header.Get("ETag") != tag {
			t.Fatalf("If-None-Match %s: %d %q ETag %q", inm, r.Status, r.Raw, r.Header.Get("ETag"))
		}
	}
	if r := a.do("GET", "/api/items", "", nil, "If-None-Match", `"stale"`); r.Status != http.StatusOK || r.Raw == "" {
		t.Fatalf("stale tag: %d", r.Status)
	}
	// The same content read again after the snapshot refreshed keeps its tag.
	time.Sleep(a.cfg.SnapshotInterval + 10*time.Millisecond)
	if again := a.do("GET", "/api/items", "", nil).Header.Get("ETag"); again != tag {
		t.Fatalf("tag changed without a change: %s then %s", tag, again)
	}
	if r := a.do("POST", "/api/admin/items/phone/stock", testAdminToken, map[string]any{"delta": 1}); r.Status != http.StatusOK {
		t.Fatalf("restock: %d", r.Status)
	}
	r = a.do("GET", "/api/items", "", nil, "If-None-Match", tag)
	if r.Status != http.StatusOK || r.Header.Get("ETag") == tag {
		t.Fatalf("after a change: %d, ETag %q (was %q)", r.Status, r.Header.Get("ETag"), tag)
	}
}
