package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/queue"
	"github.com/flashsale/flashsale/internal/ranking"
	"github.com/flashsale/flashsale/internal/testing/testenv"
	"github.com/flashsale/flashsale/web"
)

const testAdminToken = "test-admin-token"

// testAPI is the real router over the real Redis (random key prefix), driven in-process.
type testAPI struct {
	t    testing.TB
	srv  *httpapi.Server
	rdb  redis.UniversalClient
	keys keyspace.Space
	cfg  config.Config
	auth *httpapi.Auth
	inv  *inventory.Store
	ord  *orders.Store
	rank *ranking.Store // nil unless built by newRankedAPI
	q    *queue.Store
	app  *app.API
}

// newTestAPI builds the api like cmd/api does (internal/app), with every rate limit off;
// tweak adjusts the config first.
func newTestAPI(t testing.TB, tweak func(*config.Config)) *testAPI {
	t.Helper()
	return buildTestAPI(t, tweak, false)
}

// newRankedAPI is newTestAPI with the configured rate limits of pay, cancel, rating and login.
func newRankedAPI(t testing.TB, tweak func(*config.Config)) *testAPI {
	t.Helper()
	return buildTestAPI(t, tweak, true)
}

func buildTestAPI(t testing.TB, tweak func(*config.Config), ranked bool) *testAPI {
	t.Helper()
	rdb, keys := testenv.Redis(t)
	cfg, err := config.Parse(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.RedisAddrs = []string{testenv.RedisAddr()}
	cfg.RedisPrefix = keys.Prefix
	cfg.KafkaBrokers = []string{"127.0.0.1:1"} // the relay never runs here: no embedded broker
	cfg.AdminToken = testAdminToken
	cfg.JWTSecret = "test-secret"
	cfg.LimitPurchase = config.Limit{} // tests that want limits turn them on
	cfg.Payment.Provider = "none"      // POST /pay settles; payment tests start a simulator
	if !ranked {
		cfg.LimitPay, cfg.LimitCancel, cfg.LimitRating = config.Limit{}, config.Limit{}, config.Limit{}
		cfg.LimitLoginUser, cfg.LimitLoginIP = config.Limit{}, config.Limit{}
	}
	if tweak != nil {
		tweak(&cfg)
	}
	// The api exactly as cmd/api builds it (internal/app), driven in-process without Run.
	api, err := app.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	a := &testAPI{t: t, rdb: rdb, keys: keys, cfg: cfg, srv: api.Server(),
		inv: api.Inventory, ord: api.Orders, q: api.Queue, app: api}
	a.auth = a.srv.Auth
	if ranked {
		a.rank = api.Ranking
	}
	return a
}

// token mints a shopper token.
func (a *testAPI) token(user string) string {
	tok, _, err := a.auth.Mint(user)
	if err != nil {
		a.t.Fatal(err)
	}
	return tok
}

type reply struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    string
}

// code returns the error code of an error reply ("" if none).
func (r reply) code() string {
	e, _ := r.Body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// do sends a request; body may be a string (sent as is) or a value (JSON-encoded).
func (a *testAPI) do(method, path, token string, body any, headers ...string) reply {
	a.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		buf, _ := json.Marshal(b)
		rd = bytes.NewReader(buf)
	}
	req := httptest.NewRequest(method, path, rd)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	a.srv.ServeHTTP(w, req)
	r := reply{Status: w.Code, Header: w.Header(), Raw: w.Body.String()}
	_ = json.Unmarshal(w.Body.Bytes(), &r.Body)
	if r.Status >= 400 {
		// Every error has exactly the contract's body: code, message and the request id.
		e, ok := r.Body["error"].(map[string]any)
		if !ok || len(r.Body) != 1 || e["code"] == nil || e["message"] == nil || e["request_id"] != w.Header().Get("X-Request-Id") || len(e) != 3 {
			a.t.Errorf("%s %s: error body is not the contract's: %s", method, path, r.Raw)
		}
	}
	return r
}

// item creates an item through the admin route.
func (a *testAPI) item(id string, stock, limit int64) {
	a.t.Helper()
	r := a.do("PUT", "/api/admin/items/"+id, testAdminToken, map[string]any{
		"name": "Item " + id, "category": "phones", "price_cents": 1999, "stock": stock, "per_user_limit": limit,
	})
	if r.Status != http.StatusCreated {
		a.t.Fatalf("create %s: %d %s", id, r.Status, r.Raw)
	}
}

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

// syncBuffer is a log sink the handler and the test may share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

type accessLine struct {
	Level     string
	Msg       string
	RequestID string `json:"request_id"`
	Method    string
	Route     string
	Status    int
	MS        *float64
}

func (b *syncBuffer) lines(t *testing.T) []accessLine {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []accessLine
	for _, l := range bytes.Split(bytes.TrimSpace(b.buf.Bytes()), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var a accessLine
		if err := json.Unmarshal(l, &a); err != nil {
			t.Fatalf("log line %s: %v", l, err)
		}
		if a.Msg == "access" {
			out = append(out, a)
		}
	}
	b.buf.Reset()
	return out
}
