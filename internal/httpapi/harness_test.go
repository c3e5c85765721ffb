package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/limits"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/ranking"
	"github.com/flashsale/flashsale/internal/testenv"
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
}

// newTestAPI builds the api like cmd/api does, without ranking and rate limits; tweak adjusts
// the config first.
func newTestAPI(t testing.TB, tweak func(*config.Config)) *testAPI {
	t.Helper()
	return buildTestAPI(t, tweak, false)
}

// newRankedAPI is newTestAPI with ratings, leaderboards and the rate limiter wired in.
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
	cfg.AdminToken = testAdminToken
	cfg.JWTSecret = "test-secret"
	cfg.LimitPurchase = config.Limit{} // tests that want limits turn them on
	if tweak != nil {
		tweak(&cfg)
	}
	a := &testAPI{t: t, rdb: rdb, keys: keys, cfg: cfg}
	a.auth = httpapi.NewAuth(cfg.JWTSecret, cfg.AdminToken, cfg.TokenTTL)
	a.inv = inventory.NewStore(rdb, keys, inventory.Options{
		ReservationTTL: cfg.ReservationTTL, SnapshotInterval: cfg.SnapshotInterval,
		PurchaseLimit: inventory.PurchaseLimit{Rate: cfg.LimitPurchase.Rate, Period: cfg.LimitPurchase.Period, Burst: cfg.LimitPurchase.Burst},
	})
	a.ord = orders.NewStore(rdb, keys)
	deps := httpapi.Deps{
		Config: cfg, Auth: a.auth, Inventory: a.inv, Orders: a.ord,
		Ready: func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
	}
	if ranked {
		a.rank = ranking.NewStore(rdb, keys, ranking.Options{
			Size: cfg.LeaderboardSize, PriorMean: cfg.RatingPriorMean, PriorWeight: cfg.RatingPriorWeight,
		})
		a.ord.Hooks.PaidChanged = a.rank.PaidChanged
		limiter, err := limits.NewLimiter(rdb, keys, httpapi.RatePolicies(cfg))
		if err != nil {
			t.Fatal(err)
		}
		deps.Ranking, deps.Limiter = a.rank, limiter
	}
	a.srv = httpapi.New(deps)
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
