package inventory_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/testenv"
	"github.com/flashsale/flashsale/lua"
)

// BenchmarkPurchase compares, in one run, inventory.Purchase (coalescing concurrent purchases
// of one item into one script call) with a plain EVALSHA of the same script per purchase.
// Run: go test -run=^$ -bench=Purchase -benchtime=3s ./internal/inventory/
func BenchmarkPurchase(b *testing.B) {
	rdb, keys := testenv.Redis(b)
	ctx := context.Background()
	s := inventory.NewStore(rdb, keys, inventory.Options{})
	newItem(b, s, "bench", 1_000_000_000_000, 1_000_000_000)
	var n atomic.Int64

	b.Run("plain-evalsha", func(b *testing.B) {
		k := keys.Item("bench")
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				u := "u" + strconv.FormatInt(n.Add(1)%5000, 10)
				err := lua.Purchase.Run(ctx, rdb,
					[]string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox(), k.UserOrders(u), k.Idempotency(u, ""), k.PurchaseLimit(u)},
					600000, 86400000, 0, 0, 0, "bench", u, 1, "").Err()
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("store-coalesced", func(b *testing.B) {
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				u := "u" + strconv.FormatInt(n.Add(1)%5000, 10)
				if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "bench", UserID: u, Quantity: 1}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
