package app

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// unusedConns tracks the api's connections that have not sent a byte yet (http.StateNew), so
// a shutdown can close them: http.Server.Shutdown waits for such a connection as if a request
// ran on it, and a client's spare connection would hold the shutdown past its timeout.
type unusedConns struct {
	mu    sync.Mutex
	since map[net.Conn]time.Time // accepted at; removed at its first byte or its close
}

func newUnusedConns() *unusedConns { return &unusedConns{since: map[net.Conn]time.Time{}} }

// track is the server's ConnState hook.
func (u *unusedConns) track(c net.Conn, s http.ConnState) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if s == http.StateNew {
		u.since[c] = time.Now()
	} else {
		delete(u.since, c)
	}
}

// closeOlder closes the connections that have sent nothing for at least age: a client about to
// send a request sends it right after connecting, so one silent that long is a spare.
func (u *unusedConns) closeOlder(age time.Duration) {
	u.mu.Lock()
	var old []net.Conn
	for c, t := range u.since {
		if time.Since(t) >= age {
			old = append(old, c)
			delete(u.since, c)
		}
	}
	u.mu.Unlock()
	for _, c := range old {
		_ = c.Close()
	}
}

// shutdown runs srv.Shutdown(ctx) while closing, every 50 ms, the connections silent for at
// least age, so only requests really in flight are waited for.
func (u *unusedConns) shutdown(ctx context.Context, srv *http.Server, age time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		u.closeOlder(age)
		select {
		case err := <-done:
			return err
		case <-t.C:
		}
	}
}
