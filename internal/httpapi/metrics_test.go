package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/metrics"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// metricsScrape is one GET /metrics through the router, parsed.
type metricsScrape map[string]*dto.MetricFamily

func scrapeMetrics(t *testing.T, srv http.Handler) metricsScrape {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v", err)
	}
	return mfs
}

// value returns the counter (or histogram sample count) of the series with exactly these
// labels; 0 when absent.
func (s metricsScrape) value(name string, labels map[string]string) float64 {
	mf := s[name]
	if mf == nil {
		return 0
	}
	for _, m := range mf.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			if labels[l.GetName()] != l.GetValue() {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// A few purchases against the real Redis move the HTTP, purchase-outcome and script counters
// that /metrics exposes, by exactly what was done.
func TestMetricsAfterPurchases(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	metrics.InstrumentRedis(rdb)
	cfg, err := config.Parse(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	auth := httpapi.NewAuth("metrics-test-secret", "metrics-test-admin", cfg.TokenTTL)
	srv := httpapi.New(httpapi.Deps{
		Options:   app.HTTPOptions(cfg),
		Auth:      auth,
		Inventory: inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{})), // no purchase rate limit
		Orders:    orders.NewStore(rdb, keys),
		Metrics:   metrics.Handler(),
	})
	send := func(method, path, token string, body any, header ...string) int {
		t.Helper()
		var b bytes.Buffer
		if body != nil {
			if err := json.NewEncoder(&b).Encode(body); err != nil {
				t.Fatal(err)
			}
		}
		req := httptest.NewRequest(method, path, &b)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec.Code
	}
	user := func(name string) string {
		tok, _, err := auth.Mint(name)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	before := scrapeMetrics(t, srv)
	if before["go_goroutines"] == nil || before["process_cpu_seconds_total"] == nil {
		t.Fatal("/metrics lacks the Go runtime and process metrics")
	}

	item := "m" + testenv.Token(4)
	if st := send(http.MethodPut, "/api/admin/items/"+item, "metrics-test-admin",
		map[string]any{"name": "Metered", "price_cents": 100, "stock": 3, "per_user_limit": 1}); st != http.StatusCreated {
		t.Fatalf("create item: %d", st)
	}
	buy := "/api/items/" + item + "/purchase"
	steps := []struct {
		user   string
		key    string
		status int
	}{
		{"u1", "", http.StatusCreated},
		{"u1", "", http.StatusConflict}, // limit_exceeded: one per user
		{"u2", "k1", http.StatusCreated},
		{"u2", "k1", http.StatusOK}, // replayed
		{"u3", "", http.StatusCreated},
		{"u4", "", http.StatusConflict}, // sold_out
		{"", "", http.StatusUnauthorized},
	}
	for i, s := range steps {
		tok, hdr := "", []string{}
		if s.user != "" {
			tok = user(s.user)
		}
		if s.key != "" {
			hdr = []string{"Idempotency-Key", s.key}
		}
		if st := send(http.MethodPost, buy, tok, map[string]any{"quantity": 1}, hdr...); st != s.status {
			t.Fatalf("step %d (%s): status %d, want %d", i, s.user, st, s.status)
		}
	}
	send(http.MethodGet, "/no/such/path", "", nil)

	after := scrapeMetrics(t, srv)
	moved := func(name string, labels map[string]string) float64 {
		return after.value(name, labels) - before.value(name, labels)
	}
	const route = "/api/items/:id/purchase"
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"flashsale_purchases_total", map[string]string{"outcome": "reserved"}, 3},
		{"flashsale_purchases_total", map[string]string{"outcome": "replayed"}, 1},
		{"flashsale_purchases_total", map[string]string{"outcome": "limit_exceeded"}, 1},
		{"flashsale_purchases_total", map[string]string{"outcome": "sold_out"}, 1},
		{"flashsale_purchases_total", map[string]string{"outcome": "unauthorized"}, 1},
		{"flashsale_http_requests_total", map[string]string{"method": "POST", "route": route, "status": "201"}, 3},
		{"flashsale_http_requests_total", map[string]string{"method": "POST", "route": route, "status": "409"}, 2},
		{"flashsale_http_requests_total", map[string]string{"method": "POST", "route": route, "status": "200"}, 1},
		{"flashsale_http_requests_total", map[string]string{"method": "PUT", "route": "/api/admin/items/:id", "status": "201"}, 1},
		{"flashsale_http_requests_total", map[string]string{"method": "other", "route": "unmatched", "status": "404"}, 1},
		{"flashsale_http_request_duration_seconds", map[string]string{"method": "POST", "route": route}, 7},
	} {
		if got := moved(c.name, c.labels); got != c.want {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Script calls: every purchase that reached Redis ran purchase.lua (the sold-out one may
	// be answered from memory), and the item was created by upsert_item.lua.
	if got := moved("flashsale_redis_script_calls_total", map[string]string{"script": "purchase", "result": "ok"}); got < 4 {
		t.Errorf("purchase script calls moved by %v, want at least 4", got)
	}
	if got := moved("flashsale_redis_script_duration_seconds", map[string]string{"script": "purchase"}); got < 4 {
		t.Errorf("purchase script latency observations moved by %v, want at least 4", got)
	}
	if got := moved("flashsale_redis_script_calls_total", map[string]string{"script": "upsert_item", "result": "ok"}); got < 1 {
		t.Errorf("upsert_item script calls moved by %v, want at least 1", got)
	}
}
