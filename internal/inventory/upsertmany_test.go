package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestUpsertMany: every input gets the result Upsert one by one would give it, in order (a bad
// input, a refused stock change, several inputs of one item, whose last wins), Redis and the
// snapshot hold the same items after it, each with one outbox event per save, and the
// snapshot moved one generation for the whole call.
func TestUpsertMany(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{SnapshotInterval: time.Hour}))
	newItem(t, s, "old", 5, 1)
	_, gen, err := s.Catalogue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	row := func(id string, stock int64) inventory.Input {
		return inventory.Input{ID: id, Name: "Name of " + id, Category: "c", PriceCents: 10, Stock: &stock, PerUserLimit: 2}
	}
	var ins []inventory.Input
	for i := range 400 {
		ins = append(ins, row(fmt.Sprintf("m%03d", i), int64(i%7)))
	}
	ins[10].PerUserLimit = 0                    // refused before Redis
	ins[20] = row("old", 6)                     // a stock change: refused by the script
	ins[30] = row("old", 5)                     // an update
	ins[41] = row("m040", 40%7)                 // the item of the row before, again
	ins[41].Name = "Second name"                // (which ends that pipeline early)
	ins[200], ins[201] = row("m199", 1), ins[2] // a stock change of a new item; an item again
	ins[399] = row("m040", 40%7)
	ins[399].Name = "Last name"

	res, err := s.UpsertMany(ctx, ins)
	if err != nil || len(res) != len(ins) {
		t.Fatalf("UpsertMany: %d results, %v", len(res), err)
	}
	want := map[string]inventory.Input{"old": row("old", 5)}
	saves := map[string]int{"old": 1}
	for i, r := range res {
		in := ins[i]
		switch i {
		case 10:
			if !errors.Is(r.Err, inventory.ErrInvalid) {
				t.Fatalf("input 10 (per_user_limit 0): %+v", r)
			}
			continue
		case 20, 200:
			if !errors.Is(r.Err, inventory.ErrInvalidState) || r.Item.ID != in.ID {
				t.Fatalf("input %d (a stock change): %+v", i, r)
			}
			continue
		}
		_, seen := want[in.ID]
		if r.Err != nil || r.Created == seen || r.Item.ID != in.ID || r.Item.Name != in.Name ||
			r.Item.StockTotal != *in.Stock || r.Item.Version != int64(saves[in.ID]+1) || r.Item.Status == "" {
			t.Fatalf("input %d (%s, seen before: %v): %+v", i, in.ID, seen, r)
		}
		want[in.ID] = in
		saves[in.ID]++
	}

	if _, now, _ := s.Catalogue(ctx); now != gen+1 {
		t.Errorf("the snapshot moved %d generations, want 1", now-gen)
	}
	events := testenv.OutboxEvents(t, rdb, keys, "item.upserted")
	for id, in := range want {
		cached, err := s.Lookup(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if cached != stored || stored.Name != in.Name || stored.StockTotal != *in.Stock ||
			stored.Version != int64(saves[id]) || events[id] != saves[id] {
			t.Fatalf("%s: snapshot %+v, Redis %+v, %d events; want %q, stock %d, %d saves",
				id, cached, stored, events[id], in.Name, *in.Stock, saves[id])
		}
	}
	if items, _ := s.List(ctx); len(items) != len(want) {
		t.Fatalf("the snapshot lists %d items, want %d", len(items), len(want))
	}
	if got, _ := s.Lookup(ctx, "m040"); got.Name != "Last name" {
		t.Fatalf("m040's last row did not win: %q", got.Name)
	}
}

// A Redis failure in the middle of UpsertMany (one item's key holds a string: WRONGTYPE) fails
// the whole call, and the snapshot still holds exactly what Redis holds of the items it sent.
func TestUpsertManyRedisFailure(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{SnapshotInterval: time.Hour}))
	if _, err := s.List(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, keys.Item("f150").Hash(), "junk", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var ins []inventory.Input
	for i := range 400 {
		ins = append(ins, inventory.Input{ID: fmt.Sprintf("f%03d", i), Name: "n", PriceCents: 1, PerUserLimit: 1})
	}
	res, err := s.UpsertMany(ctx, ins)
	if err == nil || res != nil || errors.Is(err, inventory.ErrInvalid) {
		t.Fatalf("UpsertMany over a broken item: %d results, %v", len(res), err)
	}
	saved := 0
	for _, in := range ins {
		_, inRedis := s.Get(ctx, in.ID)
		_, inSnapshot := s.Lookup(ctx, in.ID)
		if (inRedis == nil) != (inSnapshot == nil) {
			t.Fatalf("%s: Redis says %v, the snapshot %v", in.ID, inRedis, inSnapshot)
		}
		if inRedis == nil {
			saved++
		}
	}
	if saved == 0 || saved == len(ins)-1 {
		t.Fatalf("%d of %d items saved: want those before the failure, not those after it", saved, len(ins))
	}
}
