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
)

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
