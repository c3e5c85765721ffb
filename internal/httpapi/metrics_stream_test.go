package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/metrics"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

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
