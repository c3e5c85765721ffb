package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestItemImageURL is image_url's contract: an https:// URL or a path on this host, at most
// 2,048 characters, stored in the item hash and sent in every item reply (null for none);
// anything else is a 400 naming image_url that changes nothing. PUT without it removes the
// picture; an import row without it keeps the current one. The pages' CSP allows https images.
func TestItemImageURL(t *testing.T) {
	a := newTestAPI(t, nil)
	put := func(id string, image any) reply {
		body := map[string]any{"name": "Lamp", "price_cents": 1999, "stock": 5, "per_user_limit": 2}
		if image != nil {
			body["image_url"] = image
		}
		return a.do("PUT", "/api/admin/items/"+id, testAdminToken, body)
	}
	imageOf := func(r reply) any { return r.Body["item"].(map[string]any)["image_url"] }

	const pic = "https://img.example.com/lamp.png?size=2"
	if r := put("lamp", pic); r.Status != http.StatusCreated || imageOf(r) != pic {
		t.Fatalf("PUT with an image: %d %s", r.Status, r.Raw)
	}
	if got, _ := a.rdb.HGet(context.Background(), a.keys.Item("lamp").Hash(), "image_url").Result(); got != pic {
		t.Fatalf("item hash image_url %q", got)
	}
	if r := a.do("GET", "/api/items/lamp", "", nil); imageOf(r) != pic {
		t.Errorf("GET /api/items/lamp: %s", r.Raw)
	}
	if r := a.do("GET", "/api/items", "", nil); !strings.Contains(r.Raw, `"image_url":"`+pic+`"`) {
		t.Errorf("GET /api/items: %s", r.Raw)
	}
	if r := put("desk", "/assets/desk.webp"); r.Status != http.StatusCreated || imageOf(r) != "/assets/desk.webp" {
		t.Errorf("PUT with a path on this host: %d %s", r.Status, r.Raw)
	}
	for _, bad := range []string{"http://img.example.com/x.png", "javascript:alert(1)", "//evil.example/x.png",
		"https://", "https://user:pw@img.example.com/x.png", "https://img.example.com/a b.png",
		"/x\"onerror=alert(1)", "data:image/png;base64,AAAA", "https://img.example.com/" + strings.Repeat("a", 2048)} {
		r := put("lamp", bad)
		if r.Status != http.StatusBadRequest || r.code() != "invalid_request" || !strings.Contains(r.Raw, "image_url") {
			t.Errorf("image_url %.40q: %d %s, want 400 naming image_url", bad, r.Status, r.Raw)
		}
	}
	if r := a.do("GET", "/api/items/lamp", "", nil); imageOf(r) != pic {
		t.Errorf("a refused PUT changed the picture: %s", r.Raw)
	}

	// An import row without the column keeps the picture; one with it sets it ('' removes it).
	csv := "id,name,category,price_cents,stock,per_user_limit,starts_at,ends_at\nlamp,Lamp 2,c,1999,,2,,\n"
	if r := a.do("POST", "/api/admin/items/import", testAdminToken, csv, "Content-Type", "text/csv"); r.Body["updated"] != float64(1) {
		t.Fatalf("import without image_url: %s", r.Raw)
	}
	if r := a.do("GET", "/api/items/lamp", "", nil); imageOf(r) != pic {
		t.Errorf("an import row without image_url changed the picture: %s", r.Raw)
	}
	csv = "id,name,category,price_cents,stock,per_user_limit,starts_at,ends_at,image_url\n" +
		"lamp,Lamp,c,1999,,2,,,https://img.example.com/new.png\ndesk,Desk,c,1999,,2,,,\nbad,Bad,c,1999,1,2,,,ftp://x/y.png\n"
	r := a.do("POST", "/api/admin/items/import", testAdminToken, csv, "Content-Type", "text/csv")
	if r.Body["updated"] != float64(2) || !strings.Contains(r.Raw, `"line":4`) || !strings.Contains(r.Raw, "image_url") {
		t.Fatalf("import with image_url: %s", r.Raw)
	}
	if r := a.do("GET", "/api/items/lamp", "", nil); imageOf(r) != "https://img.example.com/new.png" {
		t.Errorf("import with image_url: %s", r.Raw)
	}
	if r := a.do("GET", "/api/items/desk", "", nil); imageOf(r) != nil {
		t.Errorf("an empty image_url cell should remove the picture: %s", r.Raw)
	}
	// PUT replaces the item's fields: without image_url it has none.
	if r := put("lamp", nil); r.Status != http.StatusOK || imageOf(r) != nil {
		t.Errorf("PUT without image_url: %d %s, want 200 and image_url null", r.Status, r.Raw)
	}

	page := a.do("GET", "/", "", nil)
	if csp := page.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "img-src 'self' data: https:;") {
		t.Errorf("the pages' CSP does not allow https images: %q", csp)
	}
}
