package inventory_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// One item's stock_left as a sequential object: purchases take units (or are refused as sold
// out when fewer are left), cancels give them back, restocks add or withdraw (refused below
// zero) and report the stock left after.
type (
	stockOp struct {
		kind string // purchase | cancel | adjust
		n    int64  // quantity, or delta
	}
	stockOut struct {
		ok   bool
		left int64 // adjust: stock_left after
	}
)

var stockModel = porcupine.Model{
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		left, in, out := state.(int64), input.(stockOp), output.(stockOut)
		switch in.kind {
		case "purchase":
			if out.ok {
				return left >= in.n, left - in.n
			}
			return left < in.n, left
		case "cancel":
			return out.ok, left + in.n
		default: // adjust
			if out.ok {
				return left+in.n >= 0 && out.left == left+in.n, out.left
			}
			return left+in.n < 0, left
		}
	},
	Equal: func(a, b any) bool { return a.(int64) == b.(int64) },
}

// TestStockIsLinearizable races purchases, cancels and restocks of one item on the real Redis
// and checks with porcupine that the history is one an atomic stock counter could give. The
// purchases carry an Idempotency-Key so each asks Redis: the sold-out mark (soldout.go) may say
// "sold out" up to soldOutTrust after stock came back, not linearizable by design.
func TestStockIsLinearizable(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	inv := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	ord := orders.NewStore(rdb, keys)
	ord.Hooks.StockReturned = inv.ForgetSoldOut // as the api wires it
	newItem(t, inv, "lin", 0, 1_000_000)        // starts empty: the model's Init
	const clients, perClient = 8, 40
	var idem atomic.Int64
	var mu sync.Mutex
	var history []porcupine.Operation
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 13))
			user := "u" + strconv.Itoa(c)
			var mine []orders.Order // this client's reservations
			for range perClient {
				var in stockOp
				var out stockOut
				call := time.Now().UnixNano()
				switch r := rng.IntN(10); {
				case r < 5:
					in = stockOp{"purchase", 1 + rng.Int64N(2)}
					res, err := inv.Purchase(ctx, inventory.PurchaseRequest{ItemID: "lin", UserID: user, Quantity: in.n,
						IdempotencyKey: "k" + strconv.FormatInt(idem.Add(1), 10)})
					switch {
					case err == nil:
						out.ok = true
						mine = append(mine, res.Order)
					case errors.Is(err, inventory.ErrSoldOut):
					default:
						t.Errorf("purchase: %v", err)
						return
					}
				case r < 7 && len(mine) > 0:
					o := mine[len(mine)-1]
					mine = mine[:len(mine)-1]
					in = stockOp{"cancel", o.Quantity}
					if _, err := ord.Cancel(ctx, user, o.ID); err != nil {
						t.Errorf("cancel: %v", err)
						return
					}
					out.ok = true
				default:
					in = stockOp{"adjust", rng.Int64N(5) - 1}
					if in.n == 0 {
						in.n = 2
					}
					it, err := inv.AdjustStock(ctx, "lin", in.n)
					switch {
					case err == nil:
						out = stockOut{ok: true, left: it.StockLeft}
					case errors.Is(err, inventory.ErrInvalidState):
					default:
						t.Errorf("adjust: %v", err)
						return
					}
				}
				ret := time.Now().UnixNano()
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	switch porcupine.CheckOperationsTimeout(stockModel, history, time.Minute) {
	case porcupine.Ok:
	case porcupine.Illegal:
		t.Fatalf("the stock history of %d operations is not linearizable", len(history))
	default:
		t.Fatalf("porcupine could not decide within a minute (%d operations)", len(history))
	}
}
