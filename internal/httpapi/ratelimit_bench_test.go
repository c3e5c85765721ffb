package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/inventory"
)

// BenchmarkSoldOut compares, in one run, sold-out purchase answers through the whole router
// (token check, body decode, the in-memory short cut, the contract's error body) with a
// trivial Gin handler that writes the same 409 body. Both go through httptest in parallel.
// The snapshot loop runs as in the api (it renews the sold-out mark); no purchase reaches Redis.
// Run: go test -run='^$' -bench=SoldOut ./internal/httpapi/
func BenchmarkSoldOut(b *testing.B) {
	serve := func(b *testing.B, h http.Handler, path, token string, want int) {
		b.SetParallelism(8)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req := httptest.NewRequest("POST", path, strings.NewReader(`{"quantity":1}`))
				req.Header.Set("Content-Type", "application/json")
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != want {
					b.Errorf("status %d: %s", w.Code, w.Body.String())
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "answers/s")
	}

	b.Run("trivial-gin", func(b *testing.B) {
		gin.SetMode(gin.ReleaseMode)
		e := gin.New()
		e.POST("/x", func(c *gin.Context) {
			c.JSON(http.StatusConflict, gin.H{"error": gin.H{"code": "sold_out", "message": "not enough stock left"}})
		})
		serve(b, e, "/x", "", http.StatusConflict)
	})

	b.Run("sold-out-router", func(b *testing.B) {
		a := newLimitedAPI(b, nil)
		one := int64(1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go a.inv.RunSnapshot(ctx)
		if _, _, err := a.inv.Upsert(ctx, inventory.Input{ID: "gone", Name: "Gone", PriceCents: 1, Stock: &one, PerUserLimit: 5}); err != nil {
			b.Fatal(err)
		}
		tok := a.token("bench")
		if r := a.send("POST", "/api/items/gone/purchase", tok, "", ""); r.status != http.StatusCreated {
			b.Fatalf("buying the last unit: %d", r.status)
		}
		a.rec.scripts.Store(0)
		serve(b, a.srv, "/api/items/gone/purchase", tok, http.StatusConflict)
		b.StopTimer()
		if n := a.rec.scripts.Load(); n != 0 {
			b.Fatalf("%d purchase scripts for %d sold-out answers", n, b.N)
		}
	})
}
