package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/httpapi"
)

// sseStream is one open GET /api/items/stream read in the background: every items event's
// catalogue arrives on items (stock_left by item id); done closes when the stream ends, with
// what ended it in err.
type sseStream struct {
	items chan map[string]int64
	done  chan struct{}
	err   error
}

func openSSE(t *testing.T, base string) *sseStream {
	t.Helper()
	resp, err := http.Get(base + "/api/items/stream")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	s := &sseStream{items: make(chan map[string]int64, 100), done: make(chan struct{})}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); resp.Body.Close(); <-s.done })
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var body struct {
				Items []struct {
					ID        string `json:"id"`
					StockLeft int64  `json:"stock_left"`
				} `json:"items"`
			}
			if err := json.Unmarshal([]byte(data), &body); err != nil {
				s.err = fmt.Errorf("items event data is not the catalogue: %w", err)
				return
			}
			m := map[string]int64{}
			for _, it := range body.Items {
				m[it.ID] = it.StockLeft
			}
			select {
			case s.items <- m:
			case <-stop:
				return
			}
		}
		s.err = sc.Err()
	}()
	return s
}

// waitStock waits for an items event in which item id has stock_left want.
func (s *sseStream) waitStock(t *testing.T, id string, want int64) {
	t.Helper()
	if err := s.await(id, want); err != nil {
		t.Fatal(err)
	}
}

// await is waitStock for any goroutine: it returns what went wrong.
func (s *sseStream) await(id string, want int64) error {
	deadline := time.After(10 * time.Second)
	var last map[string]int64
	for {
		select {
		case m := <-s.items:
			if last = m; m[id] == want {
				return nil
			}
		case <-s.done:
			return fmt.Errorf("stream ended while waiting for %s at %d: %v", id, want, s.err)
		case <-deadline:
			return fmt.Errorf("no items event with %s at %d (last event: %v)", id, want, last)
		}
	}
}

// A change that lands after a stream's handler read the catalogue for its first event and
// before it joined the hub is not lost: the hub broadcast it to the streams already open, so
// the new stream must start with it or be sent it.
func TestStreamKeepsChangeMadeWhileJoining(t *testing.T) {
	a := newTestAPI(t, nil)
	a.item("phone", 10, 2)
	ts := httptest.NewServer(a.srv)
	t.Cleanup(ts.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go a.srv.RunStreams(ctx)
	t.Cleanup(a.srv.CloseStreams)

	var open *sseStream
	var armed atomic.Bool
	httpapi.SetStreamJoinHook(a.srv, func() {
		if armed.CompareAndSwap(true, false) {
			// The joining stream has read phone at 10; the change is sent to the open stream
			// before the new one joins.
			if r := a.do("POST", "/api/admin/items/phone/stock", testAdminToken, map[string]any{"delta": 5}); r.Status != http.StatusOK {
				t.Errorf("restock: %d %s", r.Status, r.Raw)
			}
			if err := open.await("phone", 15); err != nil {
				t.Error(err)
			}
		}
	})
	open = openSSE(t, ts.URL)
	open.waitStock(t, "phone", 10)
	armed.Store(true)
	joining := openSSE(t, ts.URL)
	joining.waitStock(t, "phone", 15)
}

// streamFrom opens GET /api/items/stream from the local address ip (any 127.0.0.0/8 address
// is this host's), reads the head and returns the status, the Retry-After header and the
// connection (nil unless 200). The caller closes it.
func streamFrom(t *testing.T, base, ip string) (status int, retryAfter string, conn net.Conn) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := fmt.Fprintf(c, "GET /api/items/stream HTTP/1.1\r\nHost: api\r\nAccept: text/event-stream\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After"), nil
	}
	_ = c.SetDeadline(time.Time{})
	return resp.StatusCode, resp.Header.Get("Retry-After"), c
}

// Streams are capped per client address (429 rate_limited) and in all (503
// unavailable), both with Retry-After, while other routes answer; a stream whose client has
// gone frees its place at once, not at the next heartbeat (15 s here, and no hub runs, so no
// heartbeat ever comes).
func TestStreamCaps(t *testing.T) {
	a := newTestAPI(t, func(c *config.Config) { c.StreamPerClient, c.StreamMax = 2, 3 })
	a.item("phone", 10, 2)
	ts := httptest.NewServer(a.srv)
	t.Cleanup(ts.Close)
	t.Cleanup(a.srv.CloseStreams)

	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for _, ip := range []string{"127.0.0.1", "127.0.0.1", "127.0.0.2"} {
		st, _, c := streamFrom(t, ts.URL, ip)
		if st != http.StatusOK {
			t.Fatalf("stream from %s: %d, want 200", ip, st)
		}
		held = append(held, c)
	}
	if st, ra, _ := streamFrom(t, ts.URL, "127.0.0.1"); st != http.StatusTooManyRequests || ra == "" {
		t.Fatalf("a third stream from one address: %d (Retry-After %q), want 429 with Retry-After", st, ra)
	}
	if st, ra, _ := streamFrom(t, ts.URL, "127.0.0.3"); st != http.StatusServiceUnavailable || ra == "" {
		t.Fatalf("a fourth stream in all: %d (Retry-After %q), want 503 with Retry-After", st, ra)
	}
	if r := a.do("GET", "/healthz", "", nil); r.Status != http.StatusOK {
		t.Fatalf("healthz: %d", r.Status)
	}
	if r := a.do("POST", "/api/items/phone/purchase", a.token("alice"), map[string]any{"quantity": 1}); r.Status != http.StatusCreated {
		t.Fatalf("purchase beside full streams: %d %s", r.Status, r.Raw)
	}
	// The client of the first stream goes: its place is free well before any heartbeat.
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _, c := streamFrom(t, ts.URL, "127.0.0.3")
		if st == http.StatusOK {
			held = append(held, c)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after a client closed its stream, a new one still gets %d", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// And the address it came from may open one again.
	if st, _, _ := streamFrom(t, ts.URL, "127.0.0.1"); st != http.StatusServiceUnavailable {
		t.Fatalf("the cap in all is full again, yet a stream got %d", st)
	}
}

// A stream its client closed is a normal end, logged at debug, never a slow
// request's warning (streams last as long as shoppers watch).
func TestClosedStreamLogsNoWarn(t *testing.T) {
	a := newTestAPI(t, nil)
	sink := &syncBuffer{}
	opts := app.HTTPOptions(a.cfg)
	opts.AccessLog = httpapi.AccessLog{Slow: time.Nanosecond, Logger: slog.New(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	s := httpapi.New(httpapi.Deps{Options: opts, Auth: a.auth, Inventory: a.inv})
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	t.Cleanup(s.CloseStreams)
	st, _, c := streamFrom(t, ts.URL, "127.0.0.1")
	if st != http.StatusOK {
		t.Fatalf("stream: %d", st)
	}
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	var lines []accessLine
	for len(lines) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no access line for the closed stream within 10 s (its handler did not end)")
		}
		time.Sleep(10 * time.Millisecond)
		for _, l := range sink.lines(t) {
			if l.Route == "/api/items/stream" {
				lines = append(lines, l)
			}
		}
	}
	if lines[0].Level != "DEBUG" {
		t.Fatalf("a closed stream logged at %s: %+v", lines[0].Level, lines[0])
	}
}
