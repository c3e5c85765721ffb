package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func capture(t *testing.T) *bytes.Buffer {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return &buf
}

func lines(buf *bytes.Buffer) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		_ = json.Unmarshal([]byte(l), &m)
		out = append(out, m)
	}
	return out
}

// A warning repeated while a dependency is down is written once per interval, and the next
// one says how many were held back; a different message is not held back by it.
func TestThrottle(t *testing.T) {
	buf := capture(t)
	th := NewThrottle(time.Hour)
	for range 50 {
		th.Warn("expirer: sweep failed", "err", "dial tcp: refused")
	}
	th.Warn("relay: retry")
	if got := lines(buf); len(got) != 2 {
		t.Fatalf("%d lines for 50 repeats and one other message, want 2: %s", len(got), buf)
	}
	th.every = 0 // the interval has passed
	buf.Reset()
	th.Warn("expirer: sweep failed")
	got := lines(buf)
	if len(got) != 1 || got[0]["suppressed"] != float64(49) {
		t.Fatalf("after the interval: %s, want one line with suppressed=49", buf)
	}
}

// go-redis's plain-text lines arrive as JSON warnings, throttled by their format.
func TestRedisLogger(t *testing.T) {
	buf := capture(t)
	r := NewRedis()
	for i := range 32 {
		r.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", i, "refused")
	}
	got := lines(buf)
	if len(got) != 1 || got[0]["component"] != "redis" || got[0]["level"] != "WARN" ||
		!strings.Contains(got[0]["msg"].(string), "failed to dial after 0 attempts") {
		t.Fatalf("32 pool lines became: %s", buf)
	}
}
