package httpapi_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/web"
)

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
