package app

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestShutdownClosesUnusedConns: a connection that never sent a byte (a client's spare) does
// not hold the shutdown, while a request in flight is still waited for and answered. Without
// the tracker net/http waits 5 s for such a connection, past this shutdown's 3 s.
func TestShutdownClosesUnusedConns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "done")
	})}
	conns := newUnusedConns()
	srv.ConnState = conns.track
	go func() { _ = srv.Serve(ln) }()

	spare, err := net.Dial("tcp", ln.Addr().String()) // connects, sends nothing
	if err != nil {
		t.Fatal(err)
	}
	defer spare.Close()
	answer := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			answer <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answer <- string(b)
	}()
	<-entered // the request is in flight

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- conns.shutdown(ctx, srv, unusedConnAge) }()
	close(release)
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v (the silent connection held it)", err)
	}
	if got := <-answer; got != "done" {
		t.Fatalf("the request in flight got %q, want its answer", got)
	}
	// The spare was closed by the server: a read ends at once.
	_ = spare.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := spare.Read(make([]byte, 1)); err == nil {
		t.Fatal("the silent connection is still open after the shutdown")
	}
}
