// Package stats owns the sale monitor's time series: each api instance adds its per-second
// counts (requests, purchases by outcome, latency, expiries) once a second to a Redis hash per
// wall-clock second that all share, with the shared gauges, so any instance reads the totals.
package stats

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/keyspace"
)

// Keep is how long a second's hash lives in Redis: the monitor reads at most MaxSeconds back.
const (
	MaxSeconds = 600
	Keep       = MaxSeconds*time.Second + time.Minute
)

// Outcomes are the purchase outcomes counted separately (the observe middleware's words);
// any other is counted as "other".
var Outcomes = []string{"reserved", "replayed", "sold_out", "limit_exceeded", "rate_limited",
	"sale_not_started", "sale_ended", "queue_required", "unavailable", "not_found",
	"invalid_request", "unauthorized", "client_gone", "other"}

var outcomeIndex = func() map[string]int {
	m := make(map[string]int, len(Outcomes))
	for i, o := range Outcomes {
		m[o] = i
	}
	return m
}()

// latencyBounds are the upper bounds (ms) of the latency histogram's buckets; a last,
// unbounded bucket follows. Quantiles interpolate inside a bucket.
var latencyBounds = []float64{0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 25, 50, 75, 100, 250, 500, 1000, 2500, 5000, 10000}

// Gauge reads a shared value (the same whichever instance asks, such as a Redis stream's
// length) as named fields; ok false skips it this second.
type Gauge func(ctx context.Context) (fields map[string]int64, ok bool)

// Recorder counts this instance's share of each second and flushes it to Redis.
type Recorder struct {
	rdb  redis.UniversalClient
	keys keyspace.Space

	requests  atomic.Int64
	errors5xx atomic.Int64
	purchases []atomic.Int64 // by index in Outcomes
	latency   []atomic.Int64 // by bucket: len(latencyBounds)+1

	mu       sync.Mutex
	gauges   []Gauge
	counters []*sourceCounter

	tally tallies
}

type sourceCounter struct {
	field string
	fn    func() int64
	last  int64
}

// NewRecorder returns a Recorder writing under keys.
func NewRecorder(rdb redis.UniversalClient, keys keyspace.Space) *Recorder {
	return &Recorder{rdb: rdb, keys: keys, purchases: make([]atomic.Int64, len(Outcomes)),
		latency: make([]atomic.Int64, len(latencyBounds)+1)}
}

// Request counts one answered request and its latency.
func (r *Recorder) Request(took time.Duration, status int) {
	if r == nil {
		return
	}
	r.requests.Add(1)
	if status >= 500 {
		r.errors5xx.Add(1)
	}
	ms := float64(took) / float64(time.Millisecond)
	i := 0
	for i < len(latencyBounds) && ms > latencyBounds[i] {
		i++
	}
	r.latency[i].Add(1)
}

// Purchase counts one purchase attempt by outcome.
func (r *Recorder) Purchase(outcome string) {
	if r == nil {
		return
	}
	i, ok := outcomeIndex[outcome]
	if !ok {
		i = outcomeIndex["other"]
	}
	r.purchases[i].Add(1)
}

// AddGauge adds a shared value read once a second.
func (r *Recorder) AddGauge(g Gauge) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gauges = append(r.gauges, g)
}

// CountFrom adds a per-second count taken from a total that only grows (fn), such as the
// expirer's expired reservations; instances' counts add up.
func (r *Recorder) CountFrom(field string, fn func() int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counters = append(r.counters, &sourceCounter{field: field, fn: fn, last: fn()})
}

// Run flushes once a second, just after each whole second, until ctx ends.
func (r *Recorder) Run(ctx context.Context) {
	for {
		now := time.Now()
		next := now.Truncate(time.Second).Add(time.Second + 20*time.Millisecond)
		t := time.NewTimer(next.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		fctx, cancel := context.WithTimeout(ctx, 900*time.Millisecond)
		if err := r.Flush(fctx, next.Unix()-1); err != nil && ctx.Err() == nil {
			slog.Warn("stats: flush", "err", err)
		}
		cancel()
	}
}

// Flush adds what was counted since the last flush to second sec, sets the gauges, and
// counts this instance in sec's "instances": one pipelined call.
func (r *Recorder) Flush(ctx context.Context, sec int64) error {
	key := r.keys.StatsSecond(sec)
	pipe := r.rdb.Pipeline()
	incr := func(field string, n int64) {
		if n != 0 {
			pipe.HIncrBy(ctx, key, field, n)
		}
	}
	incr("instances", 1)
	incr("req", r.requests.Swap(0))
	incr("5xx", r.errors5xx.Swap(0))
	for i, o := range Outcomes {
		incr("p:"+o, r.purchases[i].Swap(0))
	}
	for i := range r.latency {
		incr("lat:"+strconv.Itoa(i), r.latency[i].Swap(0))
	}
	r.mu.Lock()
	for _, c := range r.counters {
		v := c.fn()
		incr(c.field, v-c.last)
		c.last = v
	}
	gauges := r.gauges
	r.mu.Unlock()
	set := map[string]any{}
	for _, g := range gauges {
		if fields, ok := g(ctx); ok {
			for f, v := range fields {
				set[f] = v
			}
		}
	}
	if len(set) > 0 {
		pipe.HSet(ctx, key, set)
	}
	pipe.Expire(ctx, key, Keep)
	r.flushTallies(ctx, pipe, (sec+1)*1000-1)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("stats: flush second %d: %w", sec, err)
	}
	return nil
}

// Series is the monitor's answer: one value per second for each series, oldest first; null
// where a second has no value (no instance wrote it, or no request to measure).
type Series struct {
	StepSeconds int                   `json:"step_seconds"`
	T           []int64               `json:"t"` // unix seconds
	Instances   []int64               `json:"instances"`
	Requests    []int64               `json:"requests"`
	Errors5xx   []int64               `json:"errors_5xx"`
	Purchases   map[string][]int64    `json:"purchases"`  // by outcome, only outcomes seen
	LatencyMS   map[string][]*float64 `json:"latency_ms"` // p50, p99
	StockLeft   map[string][]*int64   `json:"stock_left"` // by item
	Expired     []int64               `json:"reservations_expired"`
	Outbox      []*int64              `json:"outbox_backlog"`
	ConsumerLag []*int64              `json:"consumer_lag"`
	// RedisFailovers are the Redis primary changes the instances saw, per second (each
	// instance counts one it saw, so two instances show 2 for one failover).
	RedisFailovers []int64 `json:"redis_failovers"`
	// RedisDataLost is set while Redis has lost its data and awaits a restore: what the
	// answering api noticed (internal/datamark), for the admin pages' banner.
	RedisDataLost string `json:"redis_data_lost,omitempty"`
}

// Read returns the last n whole seconds before now (1..MaxSeconds) for every instance.
func Read(ctx context.Context, rdb redis.UniversalClient, keys keyspace.Space, n int, now time.Time) (Series, error) {
	n = min(max(n, 1), MaxSeconds)
	last := now.Unix() - 1
	pipe := rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, n)
	s := Series{StepSeconds: 1, T: make([]int64, n), Instances: make([]int64, n), Requests: make([]int64, n),
		Errors5xx: make([]int64, n), Purchases: map[string][]int64{}, Expired: make([]int64, n),
		LatencyMS: map[string][]*float64{"p50": make([]*float64, n), "p99": make([]*float64, n)},
		StockLeft: map[string][]*int64{}, Outbox: make([]*int64, n), ConsumerLag: make([]*int64, n),
		RedisFailovers: make([]int64, n)}
	for i := range n {
		s.T[i] = last - int64(n-1-i)
		cmds[i] = pipe.HGetAll(ctx, keys.StatsSecond(s.T[i]))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return Series{}, fmt.Errorf("stats: read: %w", err)
	}
	for i, cmd := range cmds {
		hist := make([]int64, len(latencyBounds)+1)
		for f, v := range cmd.Val() {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			switch {
			case f == "instances":
				s.Instances[i] = x
			case f == "req":
				s.Requests[i] = x
			case f == "5xx":
				s.Errors5xx[i] = x
			case f == "expired":
				s.Expired[i] = x
			case f == "outbox":
				s.Outbox[i] = &x
			case f == "lag":
				s.ConsumerLag[i] = &x
			case f == "redis_failovers":
				s.RedisFailovers[i] = x
			case strings.HasPrefix(f, "p:"):
				o := f[2:]
				if s.Purchases[o] == nil {
					s.Purchases[o] = make([]int64, n)
				}
				s.Purchases[o][i] = x
			case strings.HasPrefix(f, "stock:"):
				id := f[6:]
				if s.StockLeft[id] == nil {
					s.StockLeft[id] = make([]*int64, n)
				}
				s.StockLeft[id][i] = &x
			case strings.HasPrefix(f, "lat:"):
				if b, err := strconv.Atoi(f[4:]); err == nil && b >= 0 && b < len(hist) {
					hist[b] = x
				}
			}
		}
		s.LatencyMS["p50"][i] = quantile(hist, 0.50)
		s.LatencyMS["p99"][i] = quantile(hist, 0.99)
	}
	return s, nil
}

// quantile estimates the q-quantile (ms) from bucket counts, linear inside the bucket; nil
// when nothing was counted.
func quantile(hist []int64, q float64) *float64 {
	var total int64
	for _, c := range hist {
		total += c
	}
	if total == 0 {
		return nil
	}
	rank := q * float64(total)
	var seen int64
	for i, c := range hist {
		if c == 0 || float64(seen+c) < rank {
			seen += c
			continue
		}
		lo := 0.0
		if i > 0 {
			lo = latencyBounds[i-1]
		}
		if i >= len(latencyBounds) { // the unbounded bucket: its lower bound is all we know
			return &lo
		}
		hi := latencyBounds[i]
		v := lo + (hi-lo)*(rank-float64(seen))/float64(c)
		v = math.Round(v*100) / 100
		return &v
	}
	v := latencyBounds[len(latencyBounds)-1]
	return &v
}
