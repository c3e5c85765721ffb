package limits_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/limits"
	"github.com/flashsale/flashsale/internal/testenv"
)

// BenchmarkPurchaseLimit measures, in one run, purchase attempts per second on one hot item:
//
//	off       no purchase rate limit (the baseline)
//	folded    the per-user-per-item GCRA inside purchase.lua (the current design: one round
//	          trip per batch of attempts, limit and purchase atomic)
//	separate  Limiter.Allow (its own round trip, per attempt) before a purchase without limit
//
// The limits are generous so every attempt is allowed and buys: the figure is the cost of
// deciding, not the saving from refusing. 16 goroutines per core buy as 5000 users.
// Run: go test -run='^$' -bench=PurchaseLimit ./internal/limits/
func BenchmarkPurchaseLimit(b *testing.B) {
	generous := inventory.PurchaseLimit{Rate: 1_000_000_000, Period: time.Second, Burst: 1_000_000_000}
	ctx := context.Background()
	setup := func(b *testing.B, lim inventory.PurchaseLimit) (*inventory.Store, *limits.Limiter) {
		rdb, keys := testenv.Redis(b)
		s := inventory.NewStore(rdb, keys, inventory.Options{PurchaseLimit: lim})
		stock := int64(1_000_000_000_000)
		if _, _, err := s.Upsert(ctx, inventory.Input{ID: "hot", Name: "Hot", PriceCents: 1, Stock: &stock, PerUserLimit: 1_000_000_000}); err != nil {
			b.Fatal(err)
		}
		l, err := limits.NewLimiter(rdb, keys, map[string]limits.Policy{
			"purchase": {Rate: generous.Rate, Period: generous.Period, Burst: generous.Burst}})
		if err != nil {
			b.Fatal(err)
		}
		return s, l
	}
	var n atomic.Int64
	run := func(b *testing.B, s *inventory.Store, l *limits.Limiter) {
		b.SetParallelism(16)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				u := "u" + strconv.FormatInt(n.Add(1)%5000, 10)
				if l != nil {
					d, err := l.Allow(ctx, "purchase", u+".hot")
					if err != nil || !d.Allowed {
						b.Errorf("limiter: %+v %v", d, err)
						return
					}
				}
				if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "hot", UserID: u, Quantity: 1}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "purchases/s")
	}
	b.Run("off", func(b *testing.B) {
		s, _ := setup(b, inventory.PurchaseLimit{})
		run(b, s, nil)
	})
	b.Run("folded", func(b *testing.B) {
		s, _ := setup(b, generous)
		run(b, s, nil)
	})
	b.Run("separate", func(b *testing.B) {
		s, l := setup(b, inventory.PurchaseLimit{})
		run(b, s, l)
	})
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
