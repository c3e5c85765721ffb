package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/metrics"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// Every metric follows Prometheus naming conventions (units, _total, help text).
func TestMetricsLint(t *testing.T) {
	problems, err := testutil.GatherAndLint(metrics.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "flashsale_") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}

// The registry exposes Go runtime and process metrics beside flashsale's own.
func TestRegistryHasRuntimeCollectors(t *testing.T) {
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, want := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if !have[want] {
			t.Errorf("registry lacks %s", want)
		}
	}
}

// testScript is registered like a real one so the hook can name it.
var testScript = exactlyonce.Register("metrics_test_echo", `return ARGV[1]`)

// The hook names script calls by their registered name whether they go out as EVALSHA, as
// the EVAL fallback after NOSCRIPT, or inside a pipeline; unregistered scripts are "unknown".
func TestScriptHookNamesScripts(t *testing.T) {
	rdb, space := testenv.Redis(t)
	metrics.InstrumentRedis(rdb)
	ctx := context.Background()
	const name = "metrics_test_echo"
	calls := func(result string) float64 {
		return testutil.ToFloat64(metrics.ScriptCalls.WithLabelValues(name, result))
	}
	okBefore := calls("ok")
	timed := func() uint64 { return histCount(t, "flashsale_redis_script_duration_seconds", name) }
	timedBefore := timed()

	// EVALSHA (preloaded by testenv via exactlyonce.Load).
	const n = 20
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := testScript.Run(ctx, rdb, []string{space.Prefix + "x"}, "hi").Err(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := calls("ok") - okBefore; got != n {
		t.Fatalf("ok calls of %s moved by %v, want %d", name, got, n)
	}

	// EVAL with the body (what Script.Run falls back to after NOSCRIPT).
	if err := testScript.Eval(ctx, rdb, []string{space.Prefix + "x"}, "hi").Err(); err != nil {
		t.Fatal(err)
	}
	if got := calls("ok") - okBefore; got != n+1 {
		t.Fatalf("after EVAL, ok calls moved by %v, want %d", got, n+1)
	}

	// Pipelined EVALSHA: each call counted, the pipeline timed once.
	pipe := rdb.Pipeline()
	for i := 0; i < 3; i++ {
		testScript.EvalSha(ctx, pipe, []string{space.Prefix + "x"}, "hi")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if got := calls("ok") - okBefore; got != n+4 {
		t.Fatalf("after pipeline, ok calls moved by %v, want %d", got, n+4)
	}
	if got := timed() - timedBefore; got != n+2 {
		t.Fatalf("latency observations moved by %d, want %d", got, n+2)
	}

	// A NOSCRIPT miss is counted as such: a SHA Redis never saw (an unregistered script).
	unknownBefore := testutil.ToFloat64(metrics.ScriptCalls.WithLabelValues("unknown", "noscript"))
	err := rdb.EvalSha(ctx, strings.Repeat("0", 40), []string{space.Prefix + "x"}).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
		t.Fatalf("EVALSHA of an unknown sha: %v, want NOSCRIPT", err)
	}
	if got := testutil.ToFloat64(metrics.ScriptCalls.WithLabelValues("unknown", "noscript")) - unknownBefore; got != 1 {
		t.Fatalf("unknown/noscript moved by %v, want 1", got)
	}

	pipe = rdb.Pipeline()
	pipe.EvalSha(ctx, strings.Repeat("0", 40), []string{space.Prefix + "x"})
	if _, err := pipe.Exec(ctx); err == nil {
		t.Fatal("pipelined EVALSHA of an unknown sha succeeded")
	}
	if got := testutil.ToFloat64(metrics.ScriptCalls.WithLabelValues("unknown", "noscript")) - unknownBefore; got != 2 {
		t.Fatalf("after a pipelined miss, unknown/noscript moved by %v, want 2", got)
	}

	// A script error reply is "error"; plain commands are not counted at all.
	errBefore := testutil.ToFloat64(metrics.ScriptCalls.WithLabelValues("unknown", "error"))
	if err := rdb.Eval(ctx, "return redis.error_reply('boom')", []string{space.Prefix + "x"}).Err(); err == nil {
		t.Fatal("error_reply script returned no error")
	}
	if got := testutil.ToFloat64(metrics.ScriptCalls.WithLabelValues("unknown", "error")) - errBefore; got != 1 {
		t.Fatalf("unknown/error moved by %v, want 1", got)
	}
	okNow := calls("ok")
	rdb.Set(ctx, space.Prefix+"plain", 1, 0)
	if calls("ok") != okNow {
		t.Fatal("a plain SET was counted as a script call")
	}
}

// The admin listener serves pprof and /metrics; an empty address turns it off.
func TestAdminListener(t *testing.T) {
	stop, err := metrics.StartAdmin("")
	if err != nil {
		t.Fatal(err)
	}
	stop()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stop, err = metrics.StartAdmin(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for path, want := range map[string]string{
		"/debug/pprof/":                  "goroutine",
		"/debug/pprof/goroutine?debug=1": "goroutine profile",
		"/metrics":                       "go_goroutines",
	} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %d, body lacks %q", path, resp.StatusCode, want)
		}
	}
	if _, err := metrics.StartAdmin(addr); err == nil {
		t.Error("a second listener on a busy address started without an error")
	}
}

func histCount(t *testing.T, metric, script string) uint64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "script" && l.GetValue() == script {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// The expirer counter reads the expirers' own counts at scrape time and adds them up.
func TestExpirerDrainedSumsSources(t *testing.T) {
	before := testutil.ToFloat64(metrics.ExpirerDrained)
	var a, b atomic.Int64
	metrics.ExpirerDrained.From(a.Load)
	metrics.ExpirerDrained.From(b.Load)
	a.Add(3)
	b.Add(4)
	if got := testutil.ToFloat64(metrics.ExpirerDrained) - before; got != 7 {
		t.Fatalf("expirer counter moved by %v, want 7", got)
	}
	a.Add(1)
	if got := testutil.ToFloat64(metrics.ExpirerDrained) - before; got != 8 {
		t.Fatalf("expirer counter moved by %v, want 8", got)
	}
}

func TestScrape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# HELP x_total x\nx_total 3\nx_total{result=\"applied\"} 42\nx_total_other 7\n")
	}))
	defer srv.Close()
	for series, want := range map[string]float64{`x_total{result="applied"}`: 42, "x_total": 3, "absent_total": 0} {
		if got, err := metrics.Scrape(srv.URL, series); err != nil || got != want {
			t.Errorf("Scrape(%s) = %v, %v; want %v", series, got, err, want)
		}
	}
}
