package ranking_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"
)

// BenchmarkRanking measures, in one run, rating updates and leaderboard reads against the
// plain blog-style board they replace: one ZADD per update, one ZREVRANGE per read. Compare
// the ops/s of each pair (rate vs zadd-baseline, read vs zrevrange-baseline).
// 100 items in 5 categories, 200 buyers each, boards of N = 100, full 100-item boards read.
func BenchmarkRanking(b *testing.B) {
	e := newEnv(b, defaults)
	const items, buyers = 100, 200
	cats := []string{"phones", "books", "shoes", "toys", "food"}
	pipe := e.rdb.Pipeline()
	for i := range items {
		for u := range buyers {
			pipe.HSet(ctx, e.keys.Item(fmt.Sprintf("i%03d", i)).PaidBy(), fmt.Sprintf("u%03d", u), 1)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	for i := range items { // every board full before measuring
		e.rate(fmt.Sprintf("i%03d", i), cats[i%len(cats)], "u000", 1+i%5)
	}
	baseline := e.keys.Rank() + "baseline"
	for i := range items {
		e.rdb.ZAdd(ctx, baseline, redis.Z{Score: float64(i), Member: fmt.Sprintf("i%03d", i)})
	}

	parallel := func(b *testing.B, op func(r *rand.Rand) error) {
		b.SetParallelism(8) // 16 clients on 2 cores: measures Redis throughput, not one RTT
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			r := rand.New(rand.NewPCG(rand.Uint64(), 1))
			for pb.Next() {
				if err := op(r); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	}
	b.Run("rate", func(b *testing.B) {
		parallel(b, func(r *rand.Rand) error {
			i := r.IntN(items)
			_, err := e.rank.Rate(ctx, fmt.Sprintf("i%03d", i), cats[i%len(cats)],
				fmt.Sprintf("u%03d", r.IntN(buyers)), 1+r.IntN(5))
			return err
		})
	})
	b.Run("zadd-baseline", func(b *testing.B) {
		parallel(b, func(r *rand.Rand) error {
			return e.rdb.ZAdd(ctx, baseline, redis.Z{Score: r.Float64() * 5,
				Member: fmt.Sprintf("i%03d", r.IntN(items))}).Err()
		})
	})
	for _, limit := range []int{10, 100} {
		b.Run(fmt.Sprintf("read-top%d", limit), func(b *testing.B) {
			parallel(b, func(*rand.Rand) error {
				_, err := e.rank.TopRated(ctx, "", limit)
				return err
			})
		})
		b.Run(fmt.Sprintf("zrevrange-baseline-top%d", limit), func(b *testing.B) {
			parallel(b, func(*rand.Rand) error {
				return e.rdb.ZRevRangeWithScores(ctx, baseline, 0, int64(limit-1)).Err()
			})
		})
	}
}
