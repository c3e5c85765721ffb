package httpapi_test

import (
	"fmt"
	"net/http"
	"net/url"
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
