package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/testing/options"
)

// TestSoldOutShortCutOverHTTP: once sold out, purchases are answered 409 sold_out without a single
// Redis command; a restock on another instance sells again within a second.
func TestSoldOutShortCutOverHTTP(t *testing.T) {
	a := newLimitedAPI(t, nil)
	ctx := context.Background()
	two := int64(2)
	if _, _, err := a.inv.Upsert(ctx, inventory.Input{ID: "gpu", Name: "GPU", PriceCents: 1, Stock: &two, PerUserLimit: 5}); err != nil {
		t.Fatal(err)
	}
	tok := a.token("frank")
	for i := 0; i < 3; i++ {
		r := a.send("POST", "/api/items/gpu/purchase", tok, "", "")
		if want := map[bool]int{true: 201, false: 409}[i < 2]; r.status != want {
			t.Fatalf("purchase %d: %d %s", i, r.status, r.code)
		}
	}
	a.rec.commands.Store(0)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if r := a.send("POST", "/api/items/gpu/purchase", tok, `{"quantity":1}`, ""); r.code != "sold_out" {
					t.Errorf("sold-out purchase: %d %s", r.status, r.code)
				}
			}
		}()
	}
	wg.Wait()
	if n := a.rec.commands.Load(); n != 0 {
		t.Fatalf("400 sold-out purchases sent %d Redis commands, want 0", n)
	}
	other := inventory.NewStore(a.rdb, a.keys, options.Inventory(inventory.Options{}))
	restocked := time.Now()
	if _, err := other.AdjustStock(ctx, "gpu", 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(restocked.Add(time.Second)))
	if r := a.send("POST", "/api/items/gpu/purchase", tok, "", ""); r.status != http.StatusCreated {
		t.Fatalf("a second after the restock: %d %s", r.status, r.code)
	}
}

// BenchmarkSoldOut compares sold-out purchase answers through the whole router (the snapshot
// loop renewing the mark; none reaches Redis) with a trivial Gin handler writing the same 409,
// in parallel; "interleaved" alternates 100ms turns of both and reports the ratio.
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

	trivial := func() http.Handler {
		gin.SetMode(gin.ReleaseMode)
		e := gin.New()
		e.POST("/x", func(c *gin.Context) {
			c.JSON(http.StatusConflict, gin.H{"error": gin.H{"code": "sold_out", "message": "not enough stock left"}})
		})
		return e
	}
	// soldOutAPI is the api with one sold-out item; check fails b if a purchase reached Redis.
	soldOutAPI := func(b *testing.B) (a *limitedAPI, tok string, check func()) {
		a = newLimitedAPI(b, nil)
		one := int64(1)
		ctx, cancel := context.WithCancel(context.Background())
		b.Cleanup(cancel)
		go a.inv.RunSnapshot(ctx)
		if _, _, err := a.inv.Upsert(ctx, inventory.Input{ID: "gone", Name: "Gone", PriceCents: 1, Stock: &one, PerUserLimit: 5}); err != nil {
			b.Fatal(err)
		}
		tok = a.token("bench")
		if r := a.send("POST", "/api/items/gone/purchase", tok, "", ""); r.status != http.StatusCreated {
			b.Fatalf("buying the last unit: %d", r.status)
		}
		a.rec.scripts.Store(0)
		return a, tok, func() {
			if n := a.rec.scripts.Load(); n != 0 {
				b.Fatalf("%d purchase scripts reached Redis during sold-out answers", n)
			}
		}
	}

	b.Run("trivial-gin", func(b *testing.B) { serve(b, trivial(), "/x", "", http.StatusConflict) })

	b.Run("sold-out-router", func(b *testing.B) {
		a, tok, check := soldOutAPI(b)
		serve(b, a.srv, "/api/items/gone/purchase", tok, http.StatusConflict)
		b.StopTimer()
		check()
	})

	b.Run("interleaved", func(b *testing.B) {
		a, tok, check := soldOutAPI(b)
		type side struct {
			h           http.Handler
			path, token string
			done        int64
			spent       time.Duration
		}
		sides := []*side{{h: trivial(), path: "/x"}, {h: a.srv, path: "/api/items/gone/purchase", token: tok}}
		drive := func(sd *side) {
			var done atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			deadline := start.Add(100 * time.Millisecond)
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(deadline) {
						req := httptest.NewRequest("POST", sd.path, strings.NewReader(`{"quantity":1}`))
						req.Header.Set("Content-Type", "application/json")
						if sd.token != "" {
							req.Header.Set("Authorization", "Bearer "+sd.token)
						}
						w := httptest.NewRecorder()
						sd.h.ServeHTTP(w, req)
						if w.Code != http.StatusConflict {
							b.Errorf("status %d: %s", w.Code, w.Body.String())
							return
						}
						done.Add(1)
					}
				}()
			}
			wg.Wait()
			sd.done += done.Load()
			sd.spent += time.Since(start)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for _, sd := range sides {
				drive(sd)
			}
		}
		b.StopTimer()
		check()
		rate := func(sd *side) float64 { return float64(sd.done) / sd.spent.Seconds() }
		b.ReportMetric(rate(sides[0]), "trivial-answers/s")
		b.ReportMetric(rate(sides[1]), "sold-out-answers/s")
		b.ReportMetric(rate(sides[1])/rate(sides[0]), "sold-out/trivial")
		b.ReportMetric(0, "ns/op")
	})
}

func TestQuickQuantity(t *testing.T) {
	for _, c := range []struct {
		body string
		qty  int64
		ok   bool
	}{
		{"", 1, true},
		{"{}", 1, true},
		{` { } `, 1, true},
		{`{"quantity":2}`, 2, true},
		{"{ \"quantity\" :\t17 }\n", 17, true},
		{`{"quantity":0}`, 0, true}, // then refused as out of range by the handler
		{`{"quantity":1000000000}`, 1000000000, true},
		// Everything else is left to the strict decoder (which refuses or accepts it).
		{" ", 0, false},
		{`{"quantity":-1}`, 0, false},
		{`{"quantity":01}`, 0, false},
		{`{"quantity":1.5}`, 0, false},
		{`{"quantity":12345678901}`, 0, false},
		{`{"quantity":"2"}`, 0, false},
		{`{"quantity":2,"x":1}`, 0, false},
		{`{"quantity":2}{}`, 0, false},
		{`{"Quantity":2}`, 0, false},
		{`null`, 0, false},
		{`{"quantity":null}`, 0, false},
	} {
		qty, ok := quickQuantity([]byte(c.body))
		if ok != c.ok || (ok && qty != c.qty) {
			t.Errorf("quickQuantity(%q) = %d, %v; want %d, %v", c.body, qty, ok, c.qty, c.ok)
		}
	}
}
