package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// BenchmarkQueuePoll: polls of shoppers waiting in a line that barely moves, each with its
// ticket's token, through the whole router (token check, the answer from memory, the reply).
// None may reach Redis. Allocations per poll are the figure to watch (-benchmem).
// Run: go test -run='^$' -bench=QueuePoll -benchmem ./internal/httpapi/
func BenchmarkQueuePoll(b *testing.B) {
	a := newTestAPI(b, nil)
	a.do("PUT", "/api/admin/items/line", testAdminToken, map[string]any{
		"name": "Line", "price_cents": 100, "stock": 1000000, "per_user_limit": 1,
		"queue": map[string]any{"admit_per_second": 1, "max_active": 1, "pass_ttl_seconds": 600},
	})
	const users = 256
	reqs := make([]*http.Request, users)
	for i := range reqs {
		tok := a.token("u" + strconv.Itoa(i))
		r := a.do("POST", "/api/items/line/queue", tok, nil)
		if r.Status != 200 {
			b.Fatalf("join: %d %s", r.Status, r.Raw)
		}
		req := httptest.NewRequest("GET", "/api/items/line/queue", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Queue-Ticket", r.Body["ticket"].(map[string]any)["token"].(string))
		reqs[i] = req
	}
	// The api ticks every 200ms (app.Run); this harness does not run it, so tick here.
	ctx, cancel := context.WithCancel(context.Background())
	a.q.Tick(ctx)
	done := make(chan struct{})
	go func() { a.q.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	before := a.q.PollsFromRedis.Load()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := &discard{h: http.Header{}}
		i := 0
		for pb.Next() {
			clear(w.h)
			w.code = 0
			a.srv.ServeHTTP(w, reqs[i%users])
			if w.code != 200 {
				b.Errorf("poll: %d", w.code)
				return
			}
			i++
		}
	})
	if n := a.q.PollsFromRedis.Load() - before; n > int64(b.N)/100 {
		b.Errorf("%d of %d polls read Redis", n, b.N)
	}
}

// discard is a ResponseWriter that keeps only the status.
type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header { return d.h }
func (d *discard) Write(p []byte) (int, error) {
	if d.code == 0 {
		d.code = 200
	}
	return len(p), nil
}
func (d *discard) WriteHeader(code int) { d.code = code }
