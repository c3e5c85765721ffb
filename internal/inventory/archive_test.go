package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestArchiveRacingPurchases races purchases of one item against its archive, on one node
// and on a Cluster. Once Archive has returned, no purchase that starts succeeds (sale_ended);
// none ever oversells; the orders made before it are all counted; archiving again changes
// nothing; a stock change or an update is refused.
func TestArchiveRacingPurchases(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(testing.TB) (redis.UniversalClient, keyspace.Space)
	}{
		{"node", testenv.Redis},
		{"cluster", testenv.Cluster},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb, keys := tc.open(t)
			raceArchive(t, inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{})))
		})
	}
}

func raceArchive(t *testing.T, s *inventory.Store) {
	ctx := context.Background()
	const stock = 400
	newItem(t, s, "ar", stock, 1000)

	var archived atomic.Bool // set once Archive has returned
	var sold, afterArchive atomic.Int64
	started := make(chan struct{}, 1) // the first order: archive mid-sale, not before it
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				late := archived.Load() // read before the purchase starts
				_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "ar", UserID: fmt.Sprintf("u%d", i),
					Quantity: 1, IdempotencyKey: fmt.Sprintf("%d-%d", i, j)})
				switch {
				case err == nil:
					sold.Add(1)
					if late {
						afterArchive.Add(1)
					}
					select {
					case started <- struct{}{}:
					default:
					}
				case errors.Is(err, inventory.ErrSaleEnded):
					if late {
						return
					}
				case errors.Is(err, inventory.ErrSoldOut):
				default:
					t.Errorf("purchase: %v", err)
					return
				}
			}
		}()
	}
	<-started
	it, err := s.Archive(ctx, "ar")
	archived.Store(true)
	if err != nil || it.Status != inventory.StatusArchived || it.ArchivedAt == nil {
		t.Fatalf("archive: %+v %v", it, err)
	}
	wg.Wait()

	if n := afterArchive.Load(); n != 0 {
		t.Fatalf("%d purchases that started after the archive was acknowledged succeeded", n)
	}
	got, err := s.Get(ctx, "ar")
	if err != nil {
		t.Fatal(err)
	}
	if got.Reserved != sold.Load() || got.StockLeft+got.Reserved != stock || got.StockLeft < 0 {
		t.Fatalf("after the race: left %d reserved %d, sold %d of %d", got.StockLeft, got.Reserved, sold.Load(), stock)
	}
	if got.Status != inventory.StatusEnded || got.ArchivedAt == nil || !got.ArchivedAt.Equal(*it.ArchivedAt) {
		t.Fatalf("archived item reads %+v, want status ended (shoppers) and its archive time", got)
	}
	again, err := s.Archive(ctx, "ar")
	if err != nil || !again.ArchivedAt.Equal(*it.ArchivedAt) || again.Version != got.Version {
		t.Fatalf("archive again: %+v %v, want the item unchanged", again, err)
	}
	if _, err := s.AdjustStock(ctx, "ar", 5); !errors.Is(err, inventory.ErrInvalidState) {
		t.Fatalf("restock of an archived item: %v, want ErrInvalidState", err)
	}
	if _, _, err := s.Upsert(ctx, inventory.Input{ID: "ar", Name: "renamed", PriceCents: 1, PerUserLimit: 1}); !errors.Is(err, inventory.ErrInvalidState) {
		t.Fatalf("update of an archived item: %v, want ErrInvalidState", err)
	}
	if _, err := s.Archive(ctx, "nope"); !errors.Is(err, inventory.ErrNotFound) {
		t.Fatalf("archive of an unknown item: %v, want ErrNotFound", err)
	}
}
