package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/gin-gonic/gin"
)

// BenchmarkQueuePoll: polls of 20,000 waiting shoppers (tokens beyond the CPU's caches), each
// with its ticket's token, through the whole router beside a bare Gin hello fed the same
// requests; none may reach Redis. CPU and allocations beyond the hello's are the router's share.
// Run: go test -run='^$' -bench=QueuePoll -benchmem ./internal/httpapi/
func BenchmarkQueuePoll(b *testing.B) {
	a := newTestAPI(b, nil)
	a.do("PUT", "/api/admin/items/line", testAdminToken, map[string]any{
		"name": "Line", "price_cents": 100, "stock": 1000000, "per_user_limit": 1,
		"queue": map[string]any{"admit_per_second": 1, "max_active": 1, "pass_ttl_seconds": 600},
	})
	// u0 is admitted (its polls read its pass from Redis); the others wait and are polled.
	const users = 20000
	reqs := make([]*http.Request, users)
	for i := -1; i < users; i++ {
		tok := a.token("u" + strconv.Itoa(i+1))
		r := a.do("POST", "/api/items/line/queue", tok, nil)
		if r.Status != 200 {
			b.Fatalf("join: %d %s", r.Status, r.Raw)
		}
		if i < 0 {
			continue
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

	serve := func(b *testing.B, h http.Handler) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			w := &discard{h: http.Header{}}
			i := 0
			for pb.Next() {
				clear(w.h)
				w.code = 0
				h.ServeHTTP(w, reqs[i%users])
				if w.code != 200 {
					b.Errorf("poll: %d", w.code)
					return
				}
				i++
			}
		})
	}
	b.Run("api", func(b *testing.B) {
		before := a.q.PollsFromRedis.Load()
		serve(b, a.srv)
		if n := a.q.PollsFromRedis.Load() - before; n > 0 {
			b.Errorf("%d of %d polls read Redis", n, b.N)
		}
	})
	b.Run("gin-hello", func(b *testing.B) {
		gin.SetMode(gin.ReleaseMode)
		e := gin.New()
		e.GET("/api/items/:id/queue", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"hello": "world"}) })
		serve(b, e)
	})
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
