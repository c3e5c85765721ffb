package orders_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/orders"
)

// TestAllowanceAndReplaysUnderChurn: purchases with and without idempotency keys, replays
// (also after the order was cancelled or expired), pays, cancels and expirers, all at once on
// a small per-user limit. No user ever holds more than the limit; every key of one user and
// item names one order whatever its fate; the counters, allowances and events agree at the end.
func TestAllowanceAndReplaysUnderChurn(t *testing.T) {
	const (
		ttl   = 30 * time.Millisecond
		limit = 3
	)
	e := newEnv(t, ttl)
	ctx := context.Background()
	items := []string{"ca", "cb"}
	for _, it := range items {
		e.item(it, 25, limit)
	}
	xctx, stop := context.WithCancel(ctx)
	var xwg sync.WaitGroup
	for _, every := range []time.Duration{time.Millisecond, 5 * time.Millisecond} {
		x := orders.NewExpirer(e.ord, every, 3)
		xwg.Add(1)
		go func() { defer xwg.Done(); x.Run(xctx) }()
	}
	stopWatch := watchItems(items, func(it string) bool {
		held, err := e.rdb.HGetAll(ctx, e.keys.Item(it).Held()).Result()
		if err != nil {
			t.Error(err)
			return false
		}
		for u, v := range held {
			if n, _ := strconv.Atoi(v); n > limit || n <= 0 {
				t.Errorf("%s: %s holds %d (limit %d)", it, u, n, limit)
			}
		}
		return true
	})

	type keyOf struct{ user, item, key string }
	var mu sync.Mutex
	byKey := map[keyOf]map[string]bool{} // order ids a key was answered with
	created, replayed := map[string]bool{}, map[string]bool{}
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 11))
			for range 120 {
				user := fmt.Sprintf("u%d", r.IntN(6))
				item := items[r.IntN(len(items))]
				key := ""
				if r.IntN(3) > 0 {
					key = "k" + strconv.Itoa(r.IntN(4))
				}
				res, err := e.inv.Purchase(ctx, inventory.PurchaseRequest{
					ItemID: item, UserID: user, Quantity: 1 + r.Int64N(2), IdempotencyKey: key})
				if err != nil {
					if !errors.Is(err, inventory.ErrSoldOut) && !errors.Is(err, inventory.ErrLimitExceeded) {
						t.Errorf("purchase: %v", err)
					}
					continue
				}
				id := res.Order.ID
				mu.Lock()
				if res.Replayed {
					replayed[id] = true // its creation may be recorded just after: checked at the end
				} else {
					if created[id] {
						t.Errorf("%s created twice", id)
					}
					created[id] = true
				}
				if key != "" {
					k := keyOf{user, item, key}
					if byKey[k] == nil {
						byKey[k] = map[string]bool{}
					}
					byKey[k][id] = true
				}
				mu.Unlock()
				switch r.IntN(4) {
				case 0:
					_, err = e.ord.Pay(ctx, user, id)
				case 1:
					_, err = e.ord.Cancel(ctx, user, id)
				default: // left to expire
				}
				if err != nil && !errors.Is(err, orders.ErrInvalidState) && !errors.Is(err, orders.ErrExpired) {
					t.Errorf("%s: %v", id, err)
				}
			}
		}()
	}
	wg.Wait()
	e.waitNoneReserved(ctx, items)
	stop()
	xwg.Wait()
	stopWatch()

	total := 0
	for _, it := range items {
		total += len(e.check(it).Orders)
	}
	if total != len(created) {
		t.Errorf("%d orders stored, %d created", total, len(created))
	}
	for id := range replayed {
		if !created[id] {
			t.Errorf("a replay returned %s, which no purchase created", id)
		}
	}
	for k, ids := range byKey {
		if len(ids) != 1 {
			t.Errorf("%+v answered with %d orders: %v", k, len(ids), ids)
		}
	}
	t.Logf("%d orders, %d replayed, %d keys", len(created), len(replayed), len(byKey))
}
