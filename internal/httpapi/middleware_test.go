package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/metrics"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
	"github.com/flashsale/flashsale/web"
)

func accessServer(t *testing.T, level slog.Level, al httpapi.AccessLog) (*httpapi.Server, *syncBuffer) {
	t.Helper()
	cfg, err := config.Parse(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	sink := &syncBuffer{}
	al.Logger = slog.New(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: level}))
	opts := app.HTTPOptions(cfg)
	opts.AccessLog = al
	s := httpapi.New(httpapi.Deps{Options: opts, Auth: httpapi.NewAuth(cfg.JWTSecret, cfg.AdminToken, cfg.TokenTTL), Web: web.Files})
	s.Engine().GET("/test/boom", func(*gin.Context) { panic("boom") })
	s.Engine().GET("/test/slow", func(c *gin.Context) {
		// Busy until 2 ms have passed on the clock observe reads: a condition, not a sleep.
		for start := time.Now(); time.Since(start) < 2*time.Millisecond; {
		}
		c.Status(204)
	})
	return s, sink
}

// The access log is leveled: 5xx and slow requests at warn, one in Sample at info, the rest
// at debug; each line names the request id, method, route pattern, status and milliseconds.
func TestAccessLog(t *testing.T) {
	// No slow threshold here, so no line depends on how busy the machine is.
	s, sink := accessServer(t, slog.LevelInfo, httpapi.AccessLog{})
	for i := 0; i < 5; i++ {
		serve(s, "GET", "/healthz", nil)
	}
	serve(s, "GET", "/api/nope", nil)
	if got := sink.lines(t); len(got) != 0 {
		t.Fatalf("at info, 2xx/4xx requests logged: %+v", got)
	}
	w := serve(s, "GET", "/test/boom", map[string]string{"X-Request-Id": "boom-1"})
	got := sink.lines(t)
	if len(got) != 1 {
		t.Fatalf("want the 500 at warn, got %+v", got)
	}
	if l := got[0]; l.Level != "WARN" || l.RequestID != "boom-1" || w.Header().Get("X-Request-Id") != "boom-1" ||
		l.Method != "GET" || l.Route != "/test/boom" || l.Status != 500 || l.MS == nil {
		t.Errorf("the 500's line: %+v", l)
	}

	// A request that lasts at least Slow (the handler is busy for 2 ms; Slow is 1 ms) is at warn.
	s, sink = accessServer(t, slog.LevelInfo, httpapi.AccessLog{Slow: time.Millisecond})
	serve(s, "GET", "/test/slow", nil)
	got = sink.lines(t)
	if len(got) != 1 || got[0].Level != "WARN" || got[0].Route != "/test/slow" || got[0].Status != 204 ||
		got[0].MS == nil || *got[0].MS < 2 || got[0].RequestID == "" {
		t.Errorf("the slow request's line: %+v", got)
	}

	// At debug every request has its line; an unknown path is logged as "unmatched".
	s, sink = accessServer(t, slog.LevelDebug, httpapi.AccessLog{})
	serve(s, "GET", "/healthz", map[string]string{"X-Request-Id": "h-1"})
	serve(s, "POST", "/api/no/such/route", nil)
	got = sink.lines(t)
	if len(got) != 2 || got[0].Level != "DEBUG" || got[0].RequestID != "h-1" || got[0].Route != "/healthz" ||
		got[0].Status != 200 || got[1].Route != "unmatched" || got[1].Status != 404 || got[1].Method != "POST" {
		t.Fatalf("at debug: %+v", got)
	}

	// Sampled: one request in three at info, whatever the concurrency.
	s, sink = accessServer(t, slog.LevelInfo, httpapi.AccessLog{Sample: 3})
	var wg sync.WaitGroup
	for i := 0; i < 30; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); serve(s, "GET", "/healthz", nil) }()
	}
	wg.Wait()
	got = sink.lines(t)
	if len(got) != 10 {
		t.Fatalf("30 requests sampled 1 in 3: %d lines, want 10", len(got))
	}
	for _, l := range got {
		if l.Level != "INFO" || l.Route != "/healthz" {
			t.Fatalf("sampled line: %+v", l)
		}
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

// TestReadsAreLimitedPerUser: order reads and waiting-room polls that must reach Redis are
// limited per user in the api's memory (FLASHSALE_LIMIT_READS): 429 rate_limited with the
// RateLimit headers and Retry-After. Another user keeps their budget, and a poll answered from
// memory (with its ticket token) is never limited.
func TestReadsAreLimitedPerUser(t *testing.T) {
	a := newTestAPI(t, func(c *config.Config) {
		c.LimitReads = config.Limit{Rate: 1, Period: time.Hour, Burst: 4}
	})
	a.item("lamp", 10, 5)
	// A waiting room whose sale starts in an hour: its waiting tickets are answered from memory.
	stock, starts := int64(10), time.Now().Add(time.Hour).UTC()
	if _, _, err := a.inv.Upsert(t.Context(), inventory.Input{ID: "q", Name: "Queued", Category: "c", PriceCents: 100,
		Stock: &stock, PerUserLimit: 1, StartsAt: &starts,
		Queue: &inventory.QueueSettings{AdmitPerSecond: 1, MaxActive: 1, PassTTLSeconds: 60}}); err != nil {
		t.Fatal(err)
	}
	bob := a.token("bob")
	r := a.do("POST", "/api/items/lamp/purchase", bob, nil)
	if r.Status != http.StatusCreated {
		t.Fatalf("purchase: %d %s", r.Status, r.Raw)
	}
	order := r.Body["order"].(map[string]any)["id"].(string)
	joined := a.do("POST", "/api/items/q/queue", bob, nil)
	if joined.Status != http.StatusOK {
		t.Fatalf("join: %d %s", joined.Status, joined.Raw)
	}
	ticket := joined.Body["ticket"].(map[string]any)["token"].(string)

	// Four reads in the budget (two kinds of order read, and a poll without its token)...
	for i, path := range []string{"/api/orders", "/api/orders/" + order, "/api/items/q/queue", "/api/orders"} {
		r := a.do("GET", path, bob, nil)
		if r.Status != http.StatusOK || r.Header.Get("RateLimit-Limit") != "4" {
			t.Fatalf("read %d (%s) in the budget: %d %v %s", i, path, r.Status, r.Header, r.Raw)
		}
	}
	// ...then each of them is refused, with the headers.
	for _, path := range []string{"/api/orders", "/api/orders/" + order, "/api/items/q/queue"} {
		r := a.do("GET", path, bob, nil)
		if r.Status != http.StatusTooManyRequests || r.code() != "rate_limited" {
			t.Fatalf("%s past the budget: %d %s, want 429 rate_limited", path, r.Status, r.Raw)
		}
		if r.Header.Get("Retry-After") == "" || r.Header.Get("RateLimit-Remaining") != "0" || r.Header.Get("RateLimit-Policy") == "" {
			t.Fatalf("%s past the budget: headers %v", path, r.Header)
		}
	}
	// A poll with the ticket's token is answered from memory (this api's view of the line is
	// fresh after an admission step): not limited.
	if _, err := a.q.Admit(t.Context(), "q", starts); err != nil {
		t.Fatal(err)
	}
	if r := a.do("GET", "/api/items/q/queue", bob, nil, "Queue-Ticket", ticket); r.Status != http.StatusOK {
		t.Fatalf("a poll with its token after the budget: %d %s", r.Status, r.Raw)
	}
	// Another shopper has a budget of their own.
	if r := a.do("GET", "/api/orders", a.token("carol"), nil); r.Status != http.StatusOK {
		t.Fatalf("another user's read: %d %s", r.Status, r.Raw)
	}
}

// Once a shopper is over a limit her refusals cost Redis no command (cancel, a purchase without
// a key) or one (a purchase with a new key: the replay look-up), and a settled key's replay one,
// counted on a private server (INFO commandstats). Answers and headers are Redis's own.
func TestRefusalsAndReplaysCostNoRedis(t *testing.T) {
	priv, keys, addr := testenv.PrivateRedis(t)
	a := newRankedAPI(t, func(c *config.Config) {
		c.RedisAddrs = []string{addr}
		c.RedisPrefix = keys.Prefix
		c.LimitPurchase = config.Limit{Rate: 1, Period: time.Minute, Burst: 1}
		c.LimitCancel = config.Limit{Rate: 1, Period: time.Minute, Burst: 1}
	})
	a.item("phone", 100, 5)
	tok := a.token("mallory")
	bought := a.do("POST", "/api/items/phone/purchase", tok, nil, "Idempotency-Key", "k1")
	if bought.Status != http.StatusCreated {
		t.Fatalf("purchase: %d %s", bought.Status, bought.Raw)
	}
	order, _ := bought.Body["order"].(map[string]any)
	oid, _ := order["id"].(string)

	// Replays of the settled key: 200 with the order, no RateLimit headers, one command each.
	before := testenv.Commands(t, priv)
	for i := range 50 {
		r := a.do("POST", "/api/items/phone/purchase", tok, nil, "Idempotency-Key", "k1")
		if o, _ := r.Body["order"].(map[string]any); r.Status != http.StatusOK || o["id"] != oid || r.Header.Get("RateLimit-Limit") != "" {
			t.Fatalf("replay %d: %d %v %s", i, r.Status, r.Header, r.Raw)
		}
	}
	if used := testenv.Commands(t, priv) - before - 1; used > 50 {
		t.Fatalf("50 replays of a settled key cost %d commands, want at most 50", used)
	}

	// Over the purchase limit: the first refusal is Redis's; the rest come from memory.
	first := a.do("POST", "/api/items/phone/purchase", tok, nil)
	if first.Status != http.StatusTooManyRequests || first.Header.Get("Retry-After") == "" {
		t.Fatalf("over the purchase limit: %d %v", first.Status, first.Header)
	}
	before = testenv.Commands(t, priv)
	for i := range 100 {
		r := a.do("POST", "/api/items/phone/purchase", tok, nil)
		sameRefusal(t, "purchase "+strconv.Itoa(i), first, r)
	}
	if used := testenv.Commands(t, priv) - before - 1; used != 0 {
		t.Fatalf("100 refused purchases cost %d commands, want 0", used)
	}
	before = testenv.Commands(t, priv)
	for i := range 50 {
		r := a.do("POST", "/api/items/phone/purchase", tok, nil, "Idempotency-Key", "new-"+strconv.Itoa(i))
		sameRefusal(t, "keyed purchase "+strconv.Itoa(i), first, r)
	}
	if used := testenv.Commands(t, priv) - before - 1; used > 50 {
		t.Fatalf("50 refused purchases with new keys cost %d commands, want at most 50", used)
	}

	// Cancel: allowed once (the order is cancelled), then refused; the refusals from memory.
	if r := a.do("POST", "/api/orders/"+oid+"/cancel", tok, nil); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Raw)
	}
	first = a.do("POST", "/api/orders/"+oid+"/cancel", tok, nil)
	if first.Status != http.StatusTooManyRequests {
		t.Fatalf("cancel over its limit: %d %s", first.Status, first.Raw)
	}
	before = testenv.Commands(t, priv)
	for i := range 100 {
		r := a.do("POST", "/api/orders/"+oid+"/cancel", tok, nil)
		sameRefusal(t, "cancel "+strconv.Itoa(i), first, r)
	}
	if used := testenv.Commands(t, priv) - before - 1; used != 0 {
		t.Fatalf("100 refused cancels cost %d commands, want 0", used)
	}
}

// sameRefusal: r is a 429 rate_limited with the headers of first (Retry-After and Reset may
// only have counted down).
func sameRefusal(t *testing.T, what string, first, r reply) {
	t.Helper()
	if r.Status != http.StatusTooManyRequests || r.code() != "rate_limited" {
		t.Fatalf("%s: %d %s, want 429 rate_limited", what, r.Status, r.Raw)
	}
	for _, h := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Policy"} {
		if r.Header.Get(h) != first.Header.Get(h) {
			t.Fatalf("%s: %s %q, Redis's refusal said %q", what, h, r.Header.Get(h), first.Header.Get(h))
		}
	}
	ra, _ := strconv.Atoi(r.Header.Get("Retry-After"))
	fa, _ := strconv.Atoi(first.Header.Get("Retry-After"))
	if ra < 1 || ra > fa || r.Header.Get("RateLimit") == "" || r.Header.Get("RateLimit-Reset") == "" {
		t.Fatalf("%s: headers %v, first refusal's %v", what, r.Header, first.Header)
	}
}

// TestStreamIsLeftOutOfTheLatencyHistogram: a catalogue stream's duration is how long the
// shopper watched, not a latency: it is counted as a request but never observed by
// flashsale_http_request_duration_seconds (its p99 would read 10 s).
func TestStreamIsLeftOutOfTheLatencyHistogram(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	cfg, err := config.Parse(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	srv := httpapi.New(httpapi.Deps{Options: app.HTTPOptions(cfg), Inventory: inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))})
	const route = "/api/items/stream"
	count := func(name string) float64 {
		mfs, err := metrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "route" && l.GetValue() == route {
						n += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
					}
				}
			}
		}
		return n
	}
	before := count("flashsale_http_requests_total")
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the shopper left at once: the handler returns
	req := httptest.NewRequest(http.MethodGet, route, nil).WithContext(ctx)
	srv.ServeHTTP(httptest.NewRecorder(), req)
	if got := count("flashsale_http_requests_total") - before; got != 1 {
		t.Fatalf("stream requests counted: %v, want 1", got)
	}
	if got := count("flashsale_http_request_duration_seconds"); got != 0 {
		t.Fatalf("the stream route has %v latency observations, want none", got)
	}
}
