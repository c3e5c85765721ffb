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

// TestSnapshotSweepsWhatNoScriptWrote: changes made behind the scripts' back (a key deleted by
// hand, a hash edited by hand, as a FLUSHDB or a failover to a stale replica would) write no
// change log; the snapshot's slow sweep still finds them, while an idle catalogue keeps its
// generation, so cached replies stay valid.
func TestSnapshotSweepsWhatNoScriptWrote(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{SnapshotInterval: time.Millisecond}))
	const n = 40 // several sweep steps
	for i := range n {
		if _, _, err := s.Upsert(ctx, inventory.Input{ID: "it" + strconv.Itoa(i), Name: "Item", Stock: unitsOf(5), PerUserLimit: 1}); err != nil {
			t.Fatal(err)
		}
	}
	snap, gen, err := s.Catalogue(ctx)
	if err != nil || len(snap) != n {
		t.Fatalf("first snapshot: %d items, %v", len(snap), err)
	}
	// Two full passes over an unchanged catalogue leave the generation where it was.
	for range 2 * n {
		time.Sleep(2 * time.Millisecond) // past the snapshot interval: each call refreshes
		if _, g, err := s.Catalogue(ctx); err != nil || g != gen {
			t.Fatalf("idle refresh moved the generation %d -> %d (%v)", gen, g, err)
		}
	}
	gone, edited := keys.Item("it3"), keys.Item("it17")
	if err := rdb.Del(ctx, gone.Hash()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.SRem(ctx, keys.Catalog(), "it3").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, edited.Hash(), "stock_left", 2, "version", 99).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		snap, _, err := s.Catalogue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, stale := snap["it3"]
		if !stale && snap["it17"].StockLeft == 2 && len(snap) == n-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s the snapshot still has it3: %v, it17 at %d left", stale, snap["it17"].StockLeft)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
