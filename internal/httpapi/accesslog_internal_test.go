package httpapi

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

// A request whose access line is off (a fast 2xx at info) costs no allocation: the level is
// decided first and no attribute is built. This is what every request of a sale pays.
func TestAccessLogOffAllocatesNothing(t *testing.T) {
	l := &accessLog{AccessLog: AccessLog{Slow: time.Second, Sample: 1000,
		Logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))}}
	ctx := context.Background()
	// Sample 1000 with 100 runs (plus the warm-up run) never reaches the sampled request.
	if n := testing.AllocsPerRun(100, func() {
		l.record(ctx, "abc-1", "POST", purchaseRoute, 409, 3*time.Millisecond)
	}); n != 0 {
		t.Fatalf("%v allocations per request with the line off, want 0", n)
	}
}
