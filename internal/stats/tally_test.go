package stats_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/stats"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// Purchase attempts tallied by item and outcome (from many goroutines) leave, at each flush,
// one valid sale.tally event per item in the item's outbox stream with exactly the counts; a
// flush with nothing counted appends nothing; outcomes the report does not count are ignored.
func TestTallyEvents(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	r := stats.NewRecorder(rdb, keys)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				r.Tally("phone", []string{"reserved", "sold_out", "replayed", "rate_limited"}[(g+i)%4])
			}
			r.Tally("case", "queue_required")
			r.Tally("case", "not_found")
		}()
	}
	wg.Wait()
	sec := time.Now().Unix()
	if err := r.Flush(ctx, sec); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx, sec+1); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]int64{
		"phone": {"reserved": 200, "sold_out": 200, "rate_limited": 200},
		"case":  {"queue_required": 8},
	}
	for item, counts := range want {
		evs := testenv.StreamEvents(t, rdb, keys.Item(item).Outbox())
		if len(evs) != 1 {
			t.Fatalf("%s: %d events in the outbox, want one sale.tally", item, len(evs))
		}
		e := evs[0]
		if e.Type != events.SaleTally || e.ItemID != item || e.At.UnixMilli() != (sec+1)*1000-1 ||
			fmt.Sprint(e.Outcomes) != fmt.Sprint(counts) {
			t.Errorf("%s: %+v, want outcomes %v at the end of second %d", item, e, counts, sec)
		}
	}
}

// A flood of purchases naming many items tallies at most MaxTallyItems of them a second.
func TestTallyBoundsItems(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	r := stats.NewRecorder(rdb, keys)
	for i := range stats.MaxTallyItems + 50 {
		r.Tally(fmt.Sprintf("i%d", i), "sold_out")
	}
	if err := r.Flush(context.Background(), time.Now().Unix()); err != nil {
		t.Fatal(err)
	}
	var n int
	for s := range keyspace.Shards {
		n += int(rdb.XLen(context.Background(), keys.Shard(s).Outbox()).Val())
	}
	if n != stats.MaxTallyItems {
		t.Errorf("%d sale.tally entries, want %d", n, stats.MaxTallyItems)
	}
}
