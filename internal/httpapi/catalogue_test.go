package httpapi_test

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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

// TestCataloguePages: ?limit= and ?cursor= walk the whole catalogue once, in id order, with a
// next_cursor on every page but the last; ?category= keeps one category; bad parameters are
// 400 invalid_request; no parameters is still the full list.
func TestCataloguePages(t *testing.T) {
	a := newTestAPI(t, nil)
	for i := range 7 {
		cat := "even"
		if i%2 == 1 {
			cat = "odd"
		}
		id := fmt.Sprintf("p%d", i)
		if r := a.do("PUT", "/api/admin/items/"+id, testAdminToken, map[string]any{
			"name": id, "category": cat, "price_cents": 100, "stock": 3, "per_user_limit": 1,
		}); r.Status != http.StatusCreated {
			t.Fatalf("PUT %s: %d %s", id, r.Status, r.Raw)
		}
	}
	walk := func(query string) []string {
		var ids []string
		cursor := ""
		for pages := 0; ; pages++ {
			q := query
			if cursor != "" {
				q += "&cursor=" + url.QueryEscape(cursor)
			}
			r := a.do("GET", "/api/items?"+q, "", nil)
			if r.Status != http.StatusOK {
				t.Fatalf("GET ?%s: %d %s", q, r.Status, r.Raw)
			}
			items := r.Body["items"].([]any)
			for _, it := range items {
				ids = append(ids, it.(map[string]any)["id"].(string))
			}
			next, more := r.Body["next_cursor"].(string)
			if !more {
				return ids
			}
			if len(items) == 0 || pages > 10 {
				t.Fatalf("?%s: page %d has %d items and a next_cursor %q", q, pages, len(items), next)
			}
			cursor = next
		}
	}
	if got := fmt.Sprint(walk("limit=3")); got != "[p0 p1 p2 p3 p4 p5 p6]" {
		t.Fatalf("pages of 3: %s", got)
	}
	if got := fmt.Sprint(walk("limit=2&category=odd")); got != "[p1 p3 p5]" {
		t.Fatalf("odd, pages of 2: %s", got)
	}
	if got := fmt.Sprint(walk("category=even")); got != "[p0 p2 p4 p6]" {
		t.Fatalf("even: %s", got)
	}
	if r := a.do("GET", "/api/items", "", nil); len(r.Body["items"].([]any)) != 7 || r.Body["next_cursor"] != nil {
		t.Fatalf("full list: %s", r.Raw)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "cursor=a.b", "sort=id", "category=" + url.QueryEscape("\xff")} {
		if r := a.do("GET", "/api/items?"+q, "", nil); r.Status != http.StatusBadRequest || r.code() != "invalid_request" {
			t.Errorf("?%s: %d %s, want 400 invalid_request", q, r.Status, r.Raw)
		}
	}
}

// TestCatalogueGzip: a list of 1,400 bytes or more goes gzip-compressed to a client whose
// Accept-Encoding allows gzip, and decompresses to exactly the plain reply; its ETag is the
// weak form of the plain one, and either form answers 304. A short list, a client that does
// not accept gzip (absent, q=0, another coding only) gets it plain. Vary names Accept-Encoding.
func TestCatalogueGzip(t *testing.T) {
	a := newTestAPI(t, nil)
	for i := range 30 {
		a.item(fmt.Sprintf("g%02d", i), 5, 1)
	}
	for _, path := range []string{"/api/items", "/api/items?limit=20", "/api/items?limit=1"} {
		plain := a.do("GET", path, "", nil)
		if plain.Status != http.StatusOK || plain.Header.Get("Content-Encoding") != "" || plain.Header.Get("Vary") != "Accept-Encoding" {
			t.Fatalf("GET %s: %d, Content-Encoding %q, Vary %q", path, plain.Status, plain.Header.Get("Content-Encoding"), plain.Header.Get("Vary"))
		}
		tag := plain.Header.Get("ETag")
		small := len(plain.Raw) < 1400
		if n := plain.Header.Get("Content-Length"); n != strconv.Itoa(len(plain.Raw)) {
			t.Fatalf("GET %s: Content-Length %q for %d bytes", path, n, len(plain.Raw))
		}
		for ae, accepts := range map[string]bool{"gzip": true, "gzip, deflate, br, zstd": true, "br;q=1.0, gzip;q=0.8": true,
			"*": true, "x-gzip": true, "gzip;q=0": false, "br": false, "*;q=0": false, "gzip;q=0, *": false, "identity": false} {
			r := a.do("GET", path, "", nil, "Accept-Encoding", ae)
			want := accepts && !small
			if r.Status != http.StatusOK || r.Header.Get("Vary") != "Accept-Encoding" {
				t.Fatalf("GET %s (Accept-Encoding %s): %d, Vary %q", path, ae, r.Status, r.Header.Get("Vary"))
			}
			if !want {
				if r.Header.Get("Content-Encoding") != "" || r.Raw != plain.Raw || r.Header.Get("ETag") != tag {
					t.Fatalf("GET %s (Accept-Encoding %s): Content-Encoding %q ETag %q, want it plain", path, ae, r.Header.Get("Content-Encoding"), r.Header.Get("ETag"))
				}
				continue
			}
			if n := r.Header.Get("Content-Length"); n != strconv.Itoa(len(r.Raw)) {
				t.Fatalf("GET %s gzip: Content-Length %q for %d bytes", path, n, len(r.Raw))
			}
			if r.Header.Get("Content-Encoding") != "gzip" || r.Header.Get("ETag") != "W/"+tag {
				t.Fatalf("GET %s (Accept-Encoding %s): Content-Encoding %q ETag %q, want gzip and W/%s", path, ae, r.Header.Get("Content-Encoding"), r.Header.Get("ETag"), tag)
			}
			zr, err := gzip.NewReader(strings.NewReader(r.Raw))
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(zr)
			if err != nil || string(body) != plain.Raw {
				t.Fatalf("GET %s gzip: %v; decompressed %d bytes differ from the plain %d", path, err, len(body), len(plain.Raw))
			}
			if len(r.Raw) >= len(plain.Raw)/3 {
				t.Errorf("GET %s: gzip %d bytes of %d plain", path, len(r.Raw), len(plain.Raw))
			}
			for _, inm := range []string{tag, "W/" + tag} {
				nm := a.do("GET", path, "", nil, "Accept-Encoding", ae, "If-None-Match", inm)
				if nm.Status != http.StatusNotModified || nm.Raw != "" || nm.Header.Get("ETag") != "W/"+tag {
					t.Fatalf("GET %s gzip, If-None-Match %s: %d %q ETag %q", path, inm, nm.Status, nm.Raw, nm.Header.Get("ETag"))
				}
			}
		}
		if small != (path == "/api/items?limit=1") {
			t.Fatalf("GET %s: %d bytes: the sizes no longer test both sides of the 1,400-byte bound", path, len(plain.Raw))
		}
	}
}
