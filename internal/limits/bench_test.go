package limits_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/limits"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// BenchmarkPurchaseLimit: purchase attempts/s on one hot item with no limit (off), the GCRA
// folded into purchase.lua (folded), or Limiter.Allow's own round trip first (separate). Limits
// are generous (it prices deciding, not refusing); 250ms turns share the machine's load alike.
// Run: go test -run='^$' -bench=PurchaseLimit -benchtime=8x ./internal/limits/
func BenchmarkPurchaseLimit(b *testing.B) {
	generous := limits.Policy{Rate: 1_000_000_000, Period: time.Second, Burst: 1_000_000_000}
	ctx := context.Background()
	type variant struct {
		name  string
		s     *inventory.Store
		l     *limits.Limiter
		done  int64
		spent time.Duration
	}
	setup := func(name string, lim limits.Policy, separate bool) *variant {
		rdb, keys := testenv.Redis(b)
		s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{PurchaseLimit: lim}))
		stock := int64(1_000_000_000_000)
		if _, _, err := s.Upsert(ctx, inventory.Input{ID: "hot", Name: "Hot", PriceCents: 1, Stock: &stock, PerUserLimit: 1_000_000_000}); err != nil {
			b.Fatal(err)
		}
		v := &variant{name: name, s: s}
		if separate {
			l, err := limits.NewLimiter(rdb, keys, map[string]limits.Policy{
				"purchase": {Rate: generous.Rate, Period: generous.Period, Burst: generous.Burst}})
			if err != nil {
				b.Fatal(err)
			}
			v.l = l
		}
		return v
	}
	variants := []*variant{
		setup("off", limits.Policy{}, false),
		setup("folded", generous, false),
		setup("separate", limits.Policy{}, true),
	}
	var user atomic.Int64
	drive := func(v *variant, slice time.Duration) {
		var done atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		deadline := start.Add(slice)
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					u := "u" + strconv.FormatInt(user.Add(1)%5000, 10)
					if v.l != nil {
						if d, err := v.l.Allow(ctx, "purchase", u+".hot"); err != nil || !d.Allowed {
							b.Errorf("limiter: %+v %v", d, err)
							return
						}
					}
					if _, err := v.s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "hot", UserID: u, Quantity: 1}); err != nil {
						b.Error(err)
						return
					}
					done.Add(1)
				}
			}()
		}
		wg.Wait()
		v.done += done.Load()
		v.spent += time.Since(start)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, v := range variants {
			drive(v, 250*time.Millisecond)
		}
	}
	rate := func(v *variant) float64 { return float64(v.done) / v.spent.Seconds() }
	for _, v := range variants {
		b.ReportMetric(rate(v), v.name+"-purchases/s")
	}
	b.ReportMetric(rate(variants[1])/rate(variants[0]), "folded/off")
	b.ReportMetric(rate(variants[2])/rate(variants[0]), "separate/off")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkAllow is one limiter decision per call (one EVALSHA), many subjects in parallel.
func BenchmarkAllow(b *testing.B) {
	rdb, keys := testenv.Redis(b)
	l, err := limits.NewLimiter(rdb, keys, map[string]limits.Policy{"pay": {Rate: 5, Period: time.Second, Burst: 10}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.Allow(ctx, "pay", "u"+strconv.FormatInt(n.Add(1)%5000, 10)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}
