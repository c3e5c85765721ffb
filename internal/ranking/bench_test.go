package ranking_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkRanking measures, in one run, rating updates and leaderboard reads against the
// plain blog-style board they replace: one ZADD per update, one ZREVRANGE per read.
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

	// Each pair runs interleaved, in bursts of 256 operations by 16 clients, so both sides
	// see the same load on a shared machine; the ratio is ours / the baseline's ops/s.
	pair := func(b *testing.B, ours, base func(r *rand.Rand) error) {
		var tOurs, tBase time.Duration
		for done := 0; done < b.N; done += 256 {
			n := min(256, b.N-done)
			tOurs += burst(b, n, ours)
			tBase += burst(b, n, base)
		}
		b.ReportMetric(float64(b.N)/tOurs.Seconds(), "ops/s")
		b.ReportMetric(float64(b.N)/tBase.Seconds(), "baseline-ops/s")
		b.ReportMetric(tBase.Seconds()/tOurs.Seconds(), "ratio")
	}
	rate := func(r *rand.Rand) error {
		i := r.IntN(items)
		_, err := e.rank.Rate(ctx, fmt.Sprintf("i%03d", i), cats[i%len(cats)],
			fmt.Sprintf("u%03d", r.IntN(buyers)), 1+r.IntN(5))
		return err
	}
	zadd := func(r *rand.Rand) error {
		return e.rdb.ZAdd(ctx, baseline, redis.Z{Score: r.Float64() * 5,
			Member: fmt.Sprintf("i%03d", r.IntN(items))}).Err()
	}
	b.Run("rate-vs-zadd", func(b *testing.B) { pair(b, rate, zadd) })
	for _, limit := range []int{10, 100} {
		read := func(*rand.Rand) error {
			_, err := e.rank.TopRated(ctx, "", limit)
			return err
		}
		zrevrange := func(*rand.Rand) error {
			return e.rdb.ZRevRangeWithScores(ctx, baseline, 0, int64(limit-1)).Err()
		}
		b.Run(fmt.Sprintf("read-top%d-vs-zrevrange", limit), func(b *testing.B) { pair(b, read, zrevrange) })
	}
}

// burst runs n operations on 16 concurrent clients and returns the wall time.
func burst(b *testing.B, n int, op func(r *rand.Rand) error) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(rand.Uint64(), 1))
			for next.Add(1) <= int64(n) {
				if err := op(r); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}
