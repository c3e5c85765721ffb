package stats_test

import (
	"context"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/stats"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// Two recorders (two api instances) flushing into the same second add up: requests, 5xx,
// purchases by outcome, expired reservations counted from each one's own total, and the
// latency histogram they share; gauges are set, not added; a second nobody wrote is empty.
func TestRecordersAddUp(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	var expiredA, expiredB int64 = 10, 0
	a, b := stats.NewRecorder(rdb, keys), stats.NewRecorder(rdb, keys)
	a.CountFrom("expired", func() int64 { return expiredA })
	b.CountFrom("expired", func() int64 { return expiredB })
	a.AddGauge(func(context.Context) (map[string]int64, bool) {
		return map[string]int64{"stock:phone": 7, "outbox": 3}, true
	})
	b.AddGauge(func(context.Context) (map[string]int64, bool) {
		return map[string]int64{"stock:phone": 7, "outbox": 3}, true
	})
	for range 98 {
		a.Request(time.Millisecond, 201)
	}
	b.Request(400*time.Millisecond, 503)
	b.Request(400*time.Millisecond, 200)
	a.Purchase("reserved")
	a.Purchase("reserved")
	b.Purchase("sold_out")
	b.Purchase("something new")
	expiredA, expiredB = 12, 3

	now := time.Now()
	sec := now.Unix() - 2
	if err := a.Flush(ctx, sec); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx, sec); err != nil {
		t.Fatal(err)
	}
	s, err := stats.Read(ctx, rdb, keys, 3, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.T) != 3 || s.T[1] != sec {
		t.Fatalf("t = %v, want the 3 seconds ending at %d", s.T, now.Unix()-1)
	}
	i := 1
	if s.Instances[i] != 2 || s.Requests[i] != 100 || s.Errors5xx[i] != 1 || s.Expired[i] != 5 {
		t.Fatalf("instances %d requests %d 5xx %d expired %d; want 2, 100, 1, 5",
			s.Instances[i], s.Requests[i], s.Errors5xx[i], s.Expired[i])
	}
	if s.Purchases["reserved"][i] != 2 || s.Purchases["sold_out"][i] != 1 || s.Purchases["other"][i] != 1 {
		t.Fatalf("purchases %v", s.Purchases)
	}
	if v := s.StockLeft["phone"][i]; v == nil || *v != 7 {
		t.Fatalf("stock gauge %v, want 7 (set, not added)", v)
	}
	if v := s.Outbox[i]; v == nil || *v != 3 {
		t.Fatalf("outbox gauge %v, want 3", v)
	}
	p50, p99 := s.LatencyMS["p50"][i], s.LatencyMS["p99"][i]
	if p50 == nil || *p50 > 1 || p99 == nil || *p99 < 250 || *p99 > 500 {
		t.Fatalf("p50 %v p99 %v: want about 1 ms and in the 250-500 ms bucket", p50, p99)
	}
	// The seconds around it: nobody wrote them.
	for _, j := range []int{0, 2} {
		if s.Instances[j] != 0 || s.LatencyMS["p50"][j] != nil || s.Outbox[j] != nil {
			t.Fatalf("second %d has values: instances %d", s.T[j], s.Instances[j])
		}
	}
	// Counts were taken: the next flush adds nothing but the instance.
	if err := a.Flush(ctx, sec); err != nil {
		t.Fatal(err)
	}
	s, _ = stats.Read(ctx, rdb, keys, 3, now)
	if s.Requests[i] != 100 || s.Instances[i] != 3 {
		t.Fatalf("after an empty flush: requests %d instances %d", s.Requests[i], s.Instances[i])
	}
	if ttl := rdb.TTL(ctx, keys.StatsSecond(sec)).Val(); ttl <= 0 || ttl > stats.Keep {
		t.Fatalf("TTL %s, want up to %s", ttl, stats.Keep)
	}
}
