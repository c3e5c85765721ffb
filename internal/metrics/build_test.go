package metrics_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/flashsale/flashsale/internal/metrics"
)

// TestBuildInfoAndProcessMetrics: flashsale_build_info says which Go built the binary; the
// reconciler's metrics are exported only once the reconciler registers them (the api never
// does, so it never shows them at zero).
func TestBuildInfoAndProcessMetrics(t *testing.T) {
	names := func() map[string]string {
		mfs, err := metrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, mf := range mfs {
			out[mf.GetName()] = mf.String()
		}
		return out
	}
	metrics.ConsumerEvents.WithLabelValues("applied").Add(0) // a child, which a registered vector would export
	got := names()
	bi, ok := got["flashsale_build_info"]
	if !ok || !strings.Contains(bi, runtime.Version()) || !strings.Contains(bi, `name:"commit"`) || !strings.Contains(bi, `name:"version"`) {
		t.Fatalf("flashsale_build_info: %q", bi)
	}
	for _, n := range []string{"flashsale_consumer_events_total", "flashsale_consumer_lag_messages", "flashsale_reconciler_batch_events"} {
		if _, ok := got[n]; ok {
			t.Errorf("%s is exported before the reconciler registers it", n)
		}
	}
	metrics.RegisterReconciler()
	metrics.RegisterReconciler() // twice is harmless
	got = names()
	for _, n := range []string{"flashsale_consumer_events_total", "flashsale_consumer_lag_messages", "flashsale_reconciler_batch_events"} {
		if _, ok := got[n]; !ok {
			t.Errorf("%s is missing once registered", n)
		}
	}
}
