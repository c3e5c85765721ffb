package orders_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// BenchmarkExpireBacklog drains a backlog of due reservations (FLASHSALE_EXPIRE_N, 100k) on a
// private server as the expirer does (batch=1: one per call), reporting orders/s, the script's
// max/p99/p50 (SLOWLOG), the longest call, and the worst PING beside the idle baseline.
// Run: go test -run '^$' -bench ExpireBacklog -benchtime 1x ./internal/orders/
func BenchmarkExpireBacklog(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("FLASHSALE_EXPIRE_N")); err == nil && v > 0 {
		n = v
	}
	rdb, keys, _ := testenv.PrivateRedis(b)
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "slowlog-max-len", "1000000").Err(); err != nil {
		b.Fatal(err)
	}
	for _, batch := range []int{1, 200, 1000} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			e := newEnvOn(b, rdb, keys, time.Hour)
			var drained int64
			var drainTime, maxCall, maxPing, idlePing time.Duration
			var scripts []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				item := "bulk" + strconv.Itoa(batch) + "x" + strconv.Itoa(i)
				e.seedDue(item, n)
				idlePing = max(idlePing, pingWhile(rdb, func() { time.Sleep(500 * time.Millisecond) }))
				if err := rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
					b.Fatal(err)
				}
				rdb.SlowLogReset(ctx)
				b.StartTimer()

				start := time.Now()
				ping := pingWhile(rdb, func() {
					for {
						t0 := time.Now()
						r, err := e.ord.ExpireDue(ctx, item, batch)
						maxCall = max(maxCall, time.Since(t0))
						if err != nil {
							b.Error(err)
							return
						}
						drained += r.Expired
						if r.Examined < int64(batch) {
							return
						}
					}
				})
				drainTime += time.Since(start)

				b.StopTimer()
				maxPing = max(maxPing, ping)
				scripts = append(scripts, scriptTimes(b, rdb)...)
				rdb.ConfigSet(ctx, "slowlog-log-slower-than", "10000")
				if l := e.ledger(item); l.Reserved != 0 || l.Left != l.Total {
					b.Fatalf("not drained: %+v", l)
				}
				rdb.Del(ctx, e.keys.Item(item).Outbox(), e.keys.Item(item).Orders())
				b.StartTimer()
			}
			if drained != int64(n*b.N) {
				b.Fatalf("drained %d, want %d", drained, n*b.N)
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(float64(drained)/drainTime.Seconds(), "orders/s")
			slices.Sort(scripts)
			b.ReportMetric(ms(scripts[len(scripts)-1]), "max_script_ms")
			b.ReportMetric(ms(scripts[len(scripts)*99/100]), "p99_script_ms")
			b.ReportMetric(ms(scripts[len(scripts)/2]), "p50_script_ms")
			b.ReportMetric(ms(maxCall), "max_call_ms")
			b.ReportMetric(ms(maxPing), "max_ping_ms")
			b.ReportMetric(ms(idlePing), "idle_max_ping_ms")
		})
	}
}

// pingWhile PINGs the server in a loop on its own connection while f runs and returns the
// slowest PING: how long another client waited behind whatever f made Redis do.
func pingWhile(rdb redis.UniversalClient, f func()) time.Duration {
	ctx := context.Background()
	stop := make(chan struct{})
	var worst time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			rdb.Ping(ctx)
			worst = max(worst, time.Since(t0))
		}
	}()
	f()
	close(stop)
	wg.Wait()
	return worst
}

// scriptTimes are the durations of the EVAL/EVALSHA calls in the SLOWLOG, as Redis measured them.
func scriptTimes(b *testing.B, rdb redis.UniversalClient) []time.Duration {
	logs, err := rdb.SlowLogGet(context.Background(), -1).Result()
	if err != nil {
		b.Fatal(err)
	}
	var out []time.Duration
	for _, l := range logs {
		if len(l.Args) > 0 && strings.HasPrefix(strings.ToLower(l.Args[0]), "eval") {
			out = append(out, l.Duration)
		}
	}
	if len(out) == 0 {
		b.Fatal("no script in the SLOWLOG")
	}
	return out
}
