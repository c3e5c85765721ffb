// Package logging keeps flashsale's logs one structured stream an operator can read during an
// outage: libraries' own loggers are routed into slog, and a warning that repeats while a
// dependency is down is written once per interval with the count of the ones held back.
package logging

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Throttle writes each distinct message at most once per interval; the next one written
// carries "suppressed": how many were held back since.
type Throttle struct {
	every time.Duration

	mu   sync.Mutex
	last map[string]*throttled
}

type throttled struct {
	at         time.Time
	suppressed int
}

// NewThrottle returns a Throttle letting one of each message through per interval.
func NewThrottle(every time.Duration) *Throttle {
	return &Throttle{every: every, last: map[string]*throttled{}}
}

// Log writes msg at level unless the same msg was written less than the interval ago.
func (t *Throttle) Log(ctx context.Context, level slog.Level, msg string, args ...any) {
	t.logKeyed(ctx, msg, level, msg, args...)
}

// Warn is Log at slog.LevelWarn.
func (t *Throttle) Warn(msg string, args ...any) {
	t.Log(context.Background(), slog.LevelWarn, msg, args...)
}

// Redis adapts go-redis's logger (redis.SetLogger) to slog: its lines (pool dial failures,
// mostly) become throttled warnings with component "redis", instead of plain text in the
// JSON stream, one per failed dial.
type Redis struct{ throttle *Throttle }

// NewRedis returns go-redis's logger; pass it to redis.SetLogger once at start.
func NewRedis() *Redis { return &Redis{throttle: NewThrottle(10 * time.Second)} }

// Printf implements go-redis's internal.Logging. Lines are throttled by their format, so the
// same failure with a different attempt count or address still counts as a repeat.
func (r *Redis) Printf(ctx context.Context, format string, v ...any) {
	r.throttle.logKeyed(ctx, format, slog.LevelWarn, fmt.Sprintf(format, v...), "component", "redis")
}

// logKeyed is Log with the throttling key apart from the message.
func (t *Throttle) logKeyed(ctx context.Context, key string, level slog.Level, msg string, args ...any) {
	now := time.Now()
	t.mu.Lock()
	e := t.last[key]
	if e != nil && now.Sub(e.at) < t.every {
		e.suppressed++
		t.mu.Unlock()
		return
	}
	suppressed := 0
	if e == nil {
		if len(t.last) > 1000 {
			clear(t.last)
		}
		e = &throttled{}
		t.last[key] = e
	} else {
		suppressed = e.suppressed
	}
	e.at, e.suppressed = now, 0
	t.mu.Unlock()
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	slog.Log(ctx, level, msg, args...)
}
