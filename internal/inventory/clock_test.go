package inventory_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestSnapshotSurvivesAClockThatWentBack: a failover to a replica whose time is behind makes
// the shard's change clock go back. The first refresh after a change made then (by another
// api, the sweep held off) must still show it.
func TestSnapshotSurvivesAClockThatWentBack(t *testing.T) {
	rdb, keys, _ := testenv.PrivateRedis(t)
	ctx := context.Background()
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))                            // changes
	r := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{SnapshotInterval: time.Hour})) // reads
	if _, _, err := s.Upsert(ctx, inventory.Input{ID: "a", Name: "A", Stock: unitsOf(5), PerUserLimit: 1}); err != nil {
		t.Fatal(err)
	}
	// The old primary's time ran an hour ahead: its change clock is there.
	clock := keys.Item("a").Clock()
	ahead := time.Now().Add(time.Hour).UnixMicro()
	if err := rdb.Set(ctx, clock, strconv.FormatInt(ahead, 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AdjustStock(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	snap, gen, err := r.Catalogue(ctx)
	if err != nil || snap["a"].StockTotal != 6 {
		t.Fatalf("first snapshot: %+v, %v", snap["a"], err)
	}
	r.HoldSweep()
	// The promoted replica never got the clock or the log entry; its time is now's.
	if err := rdb.Set(ctx, clock, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, keys.Item("a").Changed()).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AdjustStock(ctx, "a", 10); err != nil {
		t.Fatal(err)
	}
	if c, err := rdb.Get(ctx, clock).Int64(); err != nil || c >= ahead {
		t.Fatalf("the clock did not go back: %d (seen %d), %v", c, ahead, err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	snap, g, err := r.Catalogue(ctx)
	if err != nil || snap["a"].StockTotal != 16 || g == gen {
		t.Fatalf("after the clock went back: %+v (generation %d -> %d), %v", snap["a"], gen, g, err)
	}
	// Later changes are seen as usual from the clock read again.
	if _, err := s.AdjustStock(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if snap, _, err := r.Catalogue(ctx); err != nil || snap["a"].StockTotal != 17 {
		t.Fatalf("the next change: %+v, %v", snap["a"], err)
	}
}
