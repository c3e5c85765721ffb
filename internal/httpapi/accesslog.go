package httpapi

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// AccessLog says which requests get a log line ("access": request id, method, route, status,
// ms). A sale is many thousands of requests a second, so the line is leveled: 5xx answers and
// slow requests at warn, one in Sample at info, every other at debug. At the usual info level
// a request whose line is off costs one Enabled check: no attributes are built.
type AccessLog struct {
	Slow   time.Duration // requests at least this long log at warn; 0: none by duration
	Sample int           // every Sample-th other request logs at info; 0: none
	Logger *slog.Logger  // nil: slog.Default()
}

// accessLog is AccessLog with its sampling counter.
type accessLog struct {
	AccessLog
	seen atomic.Uint64
}

// level is the level of a request's line. A catalogue stream is never slow: it lasts as long
// as its shopper watches, and its end (the client went) is normal.
func (l *accessLog) level(route string, status int, took time.Duration) slog.Level {
	switch {
	case status >= 500 || (l.Slow > 0 && took >= l.Slow && route != streamRoute):
		return slog.LevelWarn
	case l.Sample > 0 && l.seen.Add(1)%uint64(l.Sample) == 0:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// record logs one request, if its level is on.
func (l *accessLog) record(ctx context.Context, id, method, route string, status int, took time.Duration) {
	lg := l.Logger
	if lg == nil {
		lg = slog.Default()
	}
	level := l.level(route, status, took)
	if !lg.Enabled(ctx, level) {
		return
	}
	lg.LogAttrs(ctx, level, "access", slog.String("request_id", id), slog.String("method", method),
		slog.String("route", route), slog.Int("status", status),
		slog.Float64("ms", float64(took.Microseconds())/1000))
}
