package inventory_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestRedisStallChangesOnce: Redis stalls (DEBUG SLEEP, longer than the attempt timeout) with a
// purchase, a restock and a payment in flight. The call record makes the re-sends safe: each
// change happens once and each caller gets the real answer (one order, +50, paid).
func TestRedisStallChangesOnce(t *testing.T) {
	rdb, keys, addr := testenv.PrivateRedis(t, "--enable-debug-command", "yes")
	ctx := context.Background()
	inv := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	ord := orders.NewStore(rdb, keys)
	// The stall must overlap the calls; a round where it did not (the calls ran first) proves
	// nothing, so rounds repeat until one saw a re-send.
	for round := 0; ; round++ {
		if round == 3 {
			t.Fatal("no round overlapped the stall: the calls never had to be re-sent")
		}
		item := "stall" + strconv.Itoa(round)
		newItem(t, inv, item, 10, 1)
		payMe, err := inv.Purchase(ctx, inventory.PurchaseRequest{ItemID: item, UserID: "bob", Quantity: 1})
		if err != nil {
			t.Fatal(err)
		}
		before := exactlyonce.Resends()

		stalled := stallRedis(t, addr, "3.5")
		type answer struct {
			what string
			err  error
		}
		answers := make(chan answer, 3)
		go func() {
			res, err := inv.Purchase(ctx, inventory.PurchaseRequest{ItemID: item, UserID: "alice", Quantity: 1})
			if err == nil && res.Replayed {
				err = errors.New("a fresh purchase answered as a replay")
			}
			answers <- answer{"purchase", err}
		}()
		go func() {
			it, err := inv.AdjustStock(ctx, item, 50)
			if err == nil && it.StockTotal != 60 {
				err = errors.New("stock_total " + strconv.FormatInt(it.StockTotal, 10) + " after +50 on 10")
			}
			answers <- answer{"restock", err}
		}()
		go func() {
			o, err := ord.Pay(ctx, "bob", payMe.Order.ID)
			if err == nil && o.Status != orders.Paid {
				err = errors.New("pay answered status " + string(o.Status))
			}
			answers <- answer{"pay", err}
		}()
		for range 3 {
			if a := <-answers; a.err != nil {
				t.Errorf("round %d: %s during the stall: %v", round, a.what, a.err)
			}
		}
		<-stalled

		k := keys.Item(item)
		all, err := rdb.HGetAll(ctx, k.Orders()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 2 {
			t.Errorf("round %d: %d orders in Redis, want 2 (bob's and one of alice's): %v", round, len(all), all)
		}
		f, _ := rdb.HMGet(ctx, k.Hash(), "stock_total", "stock_left", "reserved", "paid").Result()
		want := []any{"60", "58", "1", "1"}
		for i := range want {
			if f[i] != want[i] {
				t.Errorf("round %d: item figures (total, left, reserved, paid) = %v, want %v", round, f, want)
				break
			}
		}
		if t.Failed() || exactlyonce.Resends() > before {
			return
		}
	}
}

// stallRedis makes the server at addr sleep for secs seconds (DEBUG SLEEP) and returns once it
// is asleep: a PING on another connection goes unanswered. The channel closes when it wakes.
func stallRedis(t *testing.T, addr, secs string) <-chan struct{} {
	t.Helper()
	sleeper := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -1, MaxRetries: -1})
	probe := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { sleeper.Close(); probe.Close() })
	if err := probe.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := sleeper.Do(context.Background(), "DEBUG", "SLEEP", secs).Err(); err != nil {
			t.Errorf("DEBUG SLEEP: %v", err)
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := probe.Ping(pctx).Err()
		cancel()
		if err != nil {
			return done // unanswered: the server is asleep
		}
		select {
		case <-done:
			t.Fatal("DEBUG SLEEP ended before a probe saw the server asleep")
		default:
		}
	}
	t.Fatal("the server never stopped answering PING")
	return nil
}

// The longest reservation and idempotency TTLs the configuration can hold (Go durations end
// at about 292 years, 9.2e12 ms) are under the purchase script's 1e13 ms bound, so no TTL that
// starts the api can make every purchase fail.
func TestLongestTTLsPurchase(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	const longest = time.Duration(1<<63 - 1)
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{ReservationTTL: longest, IdempotencyTTL: longest}))
	newItem(t, s, "forever", 5, 5)
	res, err := s.Purchase(context.Background(), inventory.PurchaseRequest{ItemID: "forever", UserID: "u", Quantity: 1, IdempotencyKey: "k"})
	if err != nil {
		t.Fatalf("purchase with the longest TTLs: %v", err)
	}
	if want := res.Order.CreatedAt.Add(longest.Truncate(time.Millisecond)); !res.Order.ExpiresAt.Equal(want) {
		t.Fatalf("expires_at %v, want %v", res.Order.ExpiresAt, want)
	}
}
