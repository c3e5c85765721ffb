package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/web"
)

// bareServer is the router with no stores: enough for the cross-cutting behaviour of every
// answer (request ids, panics, readiness, page headers).
func bareServer(t *testing.T, ready func(context.Context) error) *httpapi.Server {
	t.Helper()
	cfg, err := config.Parse(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return httpapi.New(httpapi.Deps{Options: app.HTTPOptions(cfg), Auth: httpapi.NewAuth(cfg.JWTSecret, cfg.AdminToken, cfg.TokenTTL),
		Ready: ready, Web: web.Files})
}

func serve(s http.Handler, method, path string, header map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	return w
}

type errorBody struct {
	Error struct {
		Code, Message string
		RequestID     string `json:"request_id"`
	}
}

func TestRequestIDs(t *testing.T) {
	s := bareServer(t, nil)
	// The client's own id is answered back, and named in the error body.
	w := serve(s, "GET", "/api/nope", map[string]string{"X-Request-Id": "client-id-1"})
	var body errorBody
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if got := w.Header().Get("X-Request-Id"); got != "client-id-1" || body.Error.RequestID != "client-id-1" {
		t.Fatalf("X-Request-Id %q, error.request_id %q: want the client's id", got, body.Error.RequestID)
	}
	// A bad one (too long, control characters) is replaced; every answer has one, all distinct.
	seen := map[string]bool{}
	for _, id := range []string{strings.Repeat("x", 65), "a\tb", ""} {
		w := serve(s, "GET", "/healthz", map[string]string{"X-Request-Id": id})
		got := w.Header().Get("X-Request-Id")
		if got == "" || got == id || seen[got] {
			t.Fatalf("sent %q, answered %q (seen before: %v)", id, got, seen[got])
		}
		seen[got] = true
		if w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Fatal("an answer without X-Content-Type-Options: nosniff")
		}
	}
}

// A panic is a bug, yet the client still gets the contract's error body with the request id.
func TestPanicAnswersTheErrorBody(t *testing.T) {
	s := bareServer(t, nil)
	s.Engine().GET("/boom", func(*gin.Context) { panic("boom") })
	w := serve(s, "GET", "/boom", map[string]string{"X-Request-Id": "r-panic"})
	var body errorBody
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("panic answered %d %q: %v", w.Code, w.Body.String(), err)
	}
	if w.Code != http.StatusInternalServerError || body.Error.Code != "internal" || body.Error.RequestID != "r-panic" {
		t.Fatalf("panic answered %d %+v", w.Code, body)
	}
}

// /readyz tells the public one word; the cause (an address, a server error) goes to the log.
func TestReadyzHidesItsCause(t *testing.T) {
	s := bareServer(t, func(context.Context) error { return errors.New("dial tcp 10.1.2.3:6379: refused") })
	w := serve(s, "GET", "/readyz", nil)
	if w.Code != http.StatusServiceUnavailable || strings.Contains(w.Body.String(), "10.1.2.3") {
		t.Fatalf("readyz answered %d %s", w.Code, w.Body.String())
	}
}

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
