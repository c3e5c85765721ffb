package httpapi_test

import (
	"fmt"
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

// Names and categories are shown to shoppers and admins, so text that displays as
// something else is refused: bidi overrides and isolates (which reorder what follows) and
// zero-width characters (which hide in a name that looks like another). 400, nothing saved.
func TestNamesRefuseInvisibleCharacters(t *testing.T) {
	a := newTestAPI(t, nil)
	for i, ch := range []rune{0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E,
		0x2060, 0x2066, 0x2067, 0x2068, 0x2069, 0xFEFF, 0x061C} {
		for _, field := range []string{"name", "category"} {
			id := fmt.Sprintf("bidi-%d-%s", i, field)
			body := map[string]any{"name": "Phone", "category": "phones", "price_cents": 1, "stock": 1, "per_user_limit": 1}
			body[field] = "Pho" + string(ch) + "ne"
			r := a.do("PUT", "/api/admin/items/"+id, testAdminToken, body)
			if r.Status != http.StatusBadRequest || r.code() != "invalid_request" {
				t.Errorf("%s with U+%04X: %d %s, want 400 invalid_request", field, ch, r.Status, r.Raw)
			}
			if g := a.do("GET", "/api/items/"+id, "", nil); g.Status != http.StatusNotFound {
				t.Errorf("%s with an invisible character: the item was saved (%d)", field, g.Status)
			}
		}
	}
	// Other scripts, accents and emoji are names like any other.
	if r := a.do("PUT", "/api/admin/items/intl", testAdminToken, map[string]any{
		"name": "Téléphone 电话 هاتف 📱", "category": "téléphones", "price_cents": 1, "stock": 1, "per_user_limit": 1}); r.Status != http.StatusCreated {
		t.Fatalf("an international name: %d %s", r.Status, r.Raw)
	}
	// The import checks rows the same way.
	r := a.do("POST", "/api/admin/items/import", testAdminToken, "id,name,category,price_cents,stock,per_user_limit,starts_at,ends_at\nimp1,Pho\u202ene,c,1,1,1,,\n", "Content-Type", "text/csv")
	if r.Status != http.StatusOK || r.Body["created"] != float64(0) || len(r.Body["errors"].([]any)) != 1 {
		t.Fatalf("import of a name with a bidi override: %s", r.Raw)
	}
}
