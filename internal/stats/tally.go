package stats

import (
	"context"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/events"
)

// MaxTallyItems bounds the items one second's tallies name (a flood of purchases of many
// items costs at most this many outbox entries a second per instance; the rest of that
// second is not tallied).
const MaxTallyItems = 10000

// tallies are this instance's purchase attempts per item and outcome (events.TallyOutcomes)
// since the last flush: the sale.tally events of the post-sale report.
type tallies struct {
	mu     sync.Mutex
	counts map[string]*[len(events.TallyOutcomes)]int64
}

var tallyIndex = func() map[string]int {
	m := make(map[string]int, len(events.TallyOutcomes))
	for i, o := range events.TallyOutcomes {
		m[o] = i
	}
	return m
}()

// Tally counts one purchase attempt of item by outcome for the post-sale report; outcomes the
// report does not count (replays, bad requests, unknown items...) are ignored.
func (r *Recorder) Tally(item, outcome string) {
	i, ok := tallyIndex[outcome]
	if r == nil || !ok {
		return
	}
	t := &r.tally
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.counts[item]
	if c == nil {
		if len(t.counts) >= MaxTallyItems {
			return
		}
		if t.counts == nil {
			t.counts = map[string]*[len(events.TallyOutcomes)]int64{}
		}
		c = new([len(events.TallyOutcomes)]int64)
		t.counts[item] = c
	}
	c[i]++
}

// flushTallies appends one sale.tally entry per item counted since the last flush to the
// item's outbox stream (in pipe); at is the second's end, unix ms.
func (r *Recorder) flushTallies(ctx context.Context, pipe redis.Pipeliner, at int64) {
	t := &r.tally
	t.mu.Lock()
	counts := t.counts
	t.counts = nil
	t.mu.Unlock()
	for item, c := range counts {
		values := []any{"type", events.SaleTally, "at", strconv.FormatInt(at, 10), "item", item}
		for i, n := range c {
			if n > 0 {
				values = append(values, events.TallyOutcomes[i], n)
			}
		}
		if len(values) == 6 {
			continue // nothing the report counts (a sale.tally needs outcomes)
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: r.keys.Item(item).Outbox(), Values: values})
	}
}
