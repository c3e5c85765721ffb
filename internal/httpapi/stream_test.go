package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
