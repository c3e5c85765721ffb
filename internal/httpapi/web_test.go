package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
)

func TestPagesAreLockedDown(t *testing.T) {
	s := bareServer(t, nil)
	for _, path := range []string{"/", "/admin", "/assets/shop.js"} {
		w := serve(s, "GET", path, nil)
		if w.Code != http.StatusOK {
			t.Fatalf("%s: %d", path, w.Code)
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
		if w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", path)
		}
	}
	for _, path := range []string{"/assets/", "/assets", "/assets/../index.html", "/assets/missing.js"} {
		w := serve(s, "GET", path, nil)
		if w.Code == http.StatusOK || strings.Contains(w.Body.String(), "shop.js") {
			t.Errorf("%s answered %d %q: no listing, no escape", path, w.Code, w.Body.String())
		}
	}
}
