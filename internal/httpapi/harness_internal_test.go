package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/limits"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// limitRecorder is a go-redis hook: it keeps the last reply of the limiter script and counts
// every command (pipelines included).
type limitRecorder struct {
	commands atomic.Int64
	scripts  atomic.Int64
	mu       sync.Mutex
	last     []string
}

func (h *limitRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *limitRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.commands.Add(1)
		if strings.HasPrefix(cmd.Name(), "eval") {
			h.scripts.Add(1)
		}
		err := next(ctx, cmd)
		args := cmd.Args()
		if c, ok := cmd.(*redis.Cmd); ok && strings.HasPrefix(cmd.Name(), "eval") && len(args) > 3 &&
			strings.Contains(fmt.Sprint(args[3]), "{rl:") {
			if r, err := c.StringSlice(); err == nil {
				h.mu.Lock()
				h.last = r
				h.mu.Unlock()
			}
		}
		return err
	}
}

func (h *limitRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.commands.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func (h *limitRecorder) reply() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// limitedAPI is the real router with the limiter over the real Redis.
type limitedAPI struct {
	t    testing.TB
	srv  *Server
	rdb  redis.UniversalClient
	keys keyspace.Space
	rec  *limitRecorder
	lim  *limits.Limiter
	inv  *inventory.Store
}

// newLimitedAPI builds the api like cmd/api does; env sets FLASHSALE_* variables.
func newLimitedAPI(t testing.TB, env map[string]string) *limitedAPI {
	t.Helper()
	rdb, keys := testenv.Redis(t)
	cfg := limitConfig(t, env)
	a := &limitedAPI{t: t, rdb: rdb, keys: keys, rec: &limitRecorder{}}
	rdb.AddHook(a.rec)
	var err error
	if a.lim, err = limits.NewLimiter(rdb, keys, RatePolicies(optionsOf(cfg).Limits)); err != nil {
		t.Fatal(err)
	}
	a.inv = inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{PurchaseLimit: limits.Policy{
		Rate: cfg.LimitPurchase.Rate, Period: cfg.LimitPurchase.Period, Burst: cfg.LimitPurchase.Burst}}))
	a.srv = New(Deps{
		Options: optionsOf(cfg), Auth: NewAuth(cfg.JWTSecret, cfg.AdminToken, cfg.TokenTTL),
		Inventory: a.inv, Orders: orders.NewStore(rdb, keys), Limiter: a.lim,
	})
	return a
}

func limitConfig(t testing.TB, env map[string]string) config.Config {
	t.Helper()
	cfg, err := config.Parse(func(k string) string {
		if k == "FLASHSALE_JWT_SECRET" {
			return "limit-test-secret-0123456789abcdef"
		}
		return env[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (a *limitedAPI) token(user string) string {
	tok, _, err := a.srv.Auth.Mint(user)
	if err != nil {
		a.t.Fatal(err)
	}
	return tok
}

type limitReply struct {
	status int
	header http.Header
	code   string
	body   map[string]any
}

// send serves one request; remote is the peer address ("" for httptest's default).
func (a *limitedAPI) send(method, path, token, body, remote string, headers ...string) limitReply {
	a.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if remote != "" {
		req.RemoteAddr = remote
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	a.srv.ServeHTTP(w, req)
	r := limitReply{status: w.Code, header: w.Header()}
	_ = json.Unmarshal(w.Body.Bytes(), &r.body)
	if w.Code >= 400 {
		e, _ := r.body["error"].(map[string]any)
		r.code, _ = e["code"].(string)
		if len(r.body) != 1 || len(e) != 3 || r.code == "" || e["message"] == "" || e["request_id"] != w.Header().Get("X-Request-Id") {
			a.t.Errorf("%s %s: error body is not the contract's: %s", method, path, w.Body.String())
		}
	}
	return r
}

// watchedBody is a request body that records whether anyone read it.
type watchedBody struct {
	r    io.Reader
	read bool
}

func (b *watchedBody) Read(p []byte) (int, error) { b.read = true; return b.r.Read(p) }

// optionsOf is app.HTTPOptions, which this package's own tests cannot import (app imports it).
func optionsOf(c config.Config) Options {
	return Options{DevLogin: c.DevLogin, TrustedProxies: c.TrustedProxies, SnapshotInterval: c.SnapshotInterval,
		PurchaseLimit: limits.Policy(c.LimitPurchase), Limits: RateLimits{Pay: limits.Policy(c.LimitPay),
			Cancel: limits.Policy(c.LimitCancel), Rating: limits.Policy(c.LimitRating),
			LoginUser: limits.Policy(c.LimitLoginUser), LoginIP: limits.Policy(c.LimitLoginIP)},
		Stream: StreamOptions{Heartbeat: c.StreamHeartbeat, PerClient: c.StreamPerClient, Max: c.StreamMax}}
}
