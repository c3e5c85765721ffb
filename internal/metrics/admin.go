package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// AdminHandler serves the operator-only endpoints: net/http/pprof under /debug/pprof/ and the
// registry under /metrics (the reconciler has no other HTTP port). It is meant for a listener
// that only operators reach, never the public api port: profiles reveal internals and cost CPU.
func AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also serves heap, goroutine, allocs, block, mutex...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/metrics", Handler())
	return mux
}

// StartAdmin listens on addr (FLASHSALE_ADMIN_ADDR) and serves AdminHandler until stop is
// called; an empty addr turns the listener off (stop is then a no-op). A listen error is
// returned at once so a bad address fails start-up instead of passing unnoticed.
func StartAdmin(addr string) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin listener %s: %w", addr, err)
	}
	// No WriteTimeout: /debug/pprof/profile and /trace stream for the requested seconds.
	srv := &http.Server{Handler: AdminHandler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("admin listener stopped", "addr", addr, "err", err)
		}
	}()
	slog.Info("admin listener (pprof, metrics)", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
