package inventory_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/limits"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// soldOutCounter counts the commands a client sends (scripts separately), pipelines included.
type soldOutCounter struct{ all, scripts atomic.Int64 }

func (h *soldOutCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *soldOutCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *soldOutCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

func (h *soldOutCounter) count(cmd redis.Cmder) {
	h.all.Add(1)
	if n := strings.ToLower(cmd.Name()); strings.HasPrefix(n, "eval") {
		h.scripts.Add(1)
	}
}

func (h *soldOutCounter) reset() { h.all.Store(0); h.scripts.Store(0) }

func unitsOf(n int64) *int64 { return &n }

// TestSoldOutShortCut: once an item is sold out, purchases are answered from memory with no
// Redis command at all; stock that a cancel on another api instance returns sells again
// within a second, with no help from this instance's snapshot loop.
func TestSoldOutShortCut(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	counter := &soldOutCounter{}
	rdb.AddHook(counter)
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{
		PurchaseLimit: limits.Policy{Rate: 1000, Period: time.Second, Burst: 1000},
	}))
	if _, _, err := s.Upsert(ctx, inventory.Input{ID: "hot", Name: "Hot", PriceCents: 100, Stock: unitsOf(3), PerUserLimit: 5}); err != nil {
		t.Fatal(err)
	}
	var first orders.Order
	for i := range 3 {
		res, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "hot", UserID: "early", Quantity: 1})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = res.Order
		}
	}
	if !s.KnownSoldOut("hot") {
		t.Fatal("the purchase that took the last unit did not mark the item sold out")
	}

	counter.reset()
	const attempts = 500
	var wg sync.WaitGroup
	for i := range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "hot", UserID: "late" + string(rune('a'+i%26)), Quantity: 1})
			var pe *inventory.PurchaseError
			if !errors.Is(err, inventory.ErrSoldOut) || !errors.As(err, &pe) {
				t.Errorf("sold-out purchase: %v", err)
			}
		}()
	}
	wg.Wait()
	if n := counter.all.Load(); n != 0 {
		t.Fatalf("%d sold-out purchases sent %d Redis commands (%d scripts), want 0", attempts, n, counter.scripts.Load())
	}

	// A retry with an idempotency key must still reach Redis to get its order back.
	if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "hot", UserID: "late", Quantity: 1, IdempotencyKey: "k1"}); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("idempotent retry: %v", err)
	}
	if counter.scripts.Load() != 1 {
		t.Fatalf("an idempotent purchase was answered from memory")
	}

	// Another instance cancels an order: this instance has no hook and no snapshot loop, so
	// only the age of its mark brings it back to Redis.
	other := orders.NewStore(rdb, keys)
	returned := time.Now()
	if _, err := other.Cancel(ctx, "early", first.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(returned.Add(time.Second)))
	if s.KnownSoldOut("hot") {
		t.Fatal("still known sold out a second after a cancel returned stock")
	}
	if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "hot", UserID: "again", Quantity: 1}); err != nil {
		t.Fatalf("buying after the cancel: %v", err)
	}
}

// TestSoldOutLearnsFromSnapshot: with the snapshot loop running, a restock on another instance
// reaches this one within a snapshot interval, and an item found at zero stock by the snapshot
// is answered from memory too.
func TestSoldOutLearnsFromSnapshot(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{SnapshotInterval: 100 * time.Millisecond}))
	other := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	if _, _, err := other.Upsert(ctx, inventory.Input{ID: "empty", Name: "Empty", Stock: unitsOf(0), PerUserLimit: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx); err != nil { // one snapshot
		t.Fatal(err)
	}
	if !s.KnownSoldOut("empty") {
		t.Fatal("the snapshot did not mark a live item without stock")
	}
	go s.RunSnapshot(ctx)
	restocked := time.Now()
	if _, err := other.AdjustStock(ctx, "empty", 2); err != nil {
		t.Fatal(err)
	}
	for s.KnownSoldOut("empty") {
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("learnt of the restock after %v", time.Since(restocked))
	if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "empty", UserID: "u", Quantity: 2}); err != nil {
		t.Fatal(err)
	}
}

// TestSoldOutRespectsSaleWindow: outside the sale window the script's answer wins: an upcoming
// item with no stock yet is not marked, and a mark ends with the sale.
func TestSoldOutRespectsSaleWindow(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	soon := time.Now().Add(time.Hour)
	if _, _, err := s.Upsert(ctx, inventory.Input{ID: "soon", Name: "Soon", Stock: unitsOf(0), PerUserLimit: 1, StartsAt: &soon}); err != nil {
		t.Fatal(err)
	}
	ends := time.Now().Add(400 * time.Millisecond)
	if _, _, err := s.Upsert(ctx, inventory.Input{ID: "brief", Name: "Brief", Stock: unitsOf(1), PerUserLimit: 1, EndsAt: &ends}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx); err != nil {
		t.Fatal(err)
	}
	if s.KnownSoldOut("soon") {
		t.Fatal("an upcoming item was marked sold out")
	}
	if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "soon", UserID: "u", Quantity: 1}); !errors.Is(err, inventory.ErrSaleNotStarted) {
		t.Fatalf("upcoming item: %v", err)
	}
	if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "brief", UserID: "u", Quantity: 1}); err != nil {
		t.Fatal(err)
	}
	if !s.KnownSoldOut("brief") {
		t.Fatal("not marked after the last unit sold")
	}
	time.Sleep(time.Until(ends) + 10*time.Millisecond)
	if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "brief", UserID: "v", Quantity: 1}); !errors.Is(err, inventory.ErrSaleEnded) {
		t.Fatalf("after the sale ended: %v, want sale_ended", err)
	}
}
