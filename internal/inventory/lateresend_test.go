package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/redisconn"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestLateResendAppliesOnce: a change re-sent long after it first ran must not run again. A
// fault proxy drops the replies of a purchase, a restock and a payment that ran, and holds each
// re-send until the first run's call record has expired: released, it is refused (its deadline
// has passed), not applied twice.
func TestLateResendAppliesOnce(t *testing.T) {
	ctx := context.Background()
	toxics := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	// Each case has a server of its own, so its count of script calls is its own.
	type world struct {
		direct redis.UniversalClient
		keys   keyspace.Space
		setup  *inventory.Store
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, w world, item string) string // returns an order id where one is needed
		do    func(inv *inventory.Store, ord *orders.Store, item, order string) error
		check func(t *testing.T, w world, item string)
	}{
		{
			name: "purchase without a key",
			do: func(inv *inventory.Store, _ *orders.Store, item, _ string) error {
				_, err := inv.Purchase(ctx, inventory.PurchaseRequest{ItemID: item, UserID: "alice", Quantity: 1})
				return err
			},
			check: func(t *testing.T, w world, item string) {
				n, err := w.direct.HLen(ctx, w.keys.Item(item).Orders()).Result()
				if err != nil || n != 1 {
					t.Errorf("%d orders after one purchase re-sent late (err %v), want 1", n, err)
				}
				if left, _ := w.direct.HGet(ctx, w.keys.Item(item).Hash(), "stock_left").Int(); left != 9 {
					t.Errorf("stock_left %d after one purchase of 1 of 10, want 9", left)
				}
			},
		},
		{
			name: "restock +777",
			do: func(inv *inventory.Store, _ *orders.Store, item, _ string) error {
				_, err := inv.AdjustStock(ctx, item, 777)
				return err
			},
			check: func(t *testing.T, w world, item string) {
				total, _ := w.direct.HGet(ctx, w.keys.Item(item).Hash(), "stock_total").Int()
				if total != 10+777 {
					t.Errorf("stock_total %d after +777 on 10 re-sent late, want 787", total)
				}
			},
		},
		{
			name: "pay",
			setup: func(t *testing.T, w world, item string) string {
				res, err := w.setup.Purchase(ctx, inventory.PurchaseRequest{ItemID: item, UserID: "bob", Quantity: 1})
				if err != nil {
					t.Fatal(err)
				}
				return res.Order.ID
			},
			do: func(_ *inventory.Store, ord *orders.Store, _, order string) error {
				_, err := ord.Pay(ctx, "bob", order)
				return err
			},
			check: func(t *testing.T, w world, item string) {
				if paid, _ := w.direct.HGet(ctx, w.keys.Item(item).Hash(), "paid").Int(); paid != 1 {
					t.Errorf("paid %d after one payment re-sent late, want 1", paid)
				}
				if n := testenv.OutboxEvents(t, w.direct, w.keys, "order.paid")[item]; n != 1 {
					t.Errorf("%d order.paid events after one payment re-sent late, want 1", n)
				}
			},
		},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			direct, keys, addr := testenv.PrivateRedis(t)
			w := world{direct: direct, keys: keys, setup: inventory.NewStore(direct, keys, options.Inventory(inventory.Options{}))}
			item := "late" + strconv.Itoa(i)
			newItem(t, w.setup, item, 10, 5)
			var order string
			if c.setup != nil {
				order = c.setup(t, w, item)
			}
			px := toxiproxy.NewProxy(toxics, "redis"+strconv.Itoa(i), "127.0.0.1:0", addr)
			if err := px.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(px.Stop)
			rdb, err := redisconn.Open(ctx, []string{px.Listen}, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rdb.Close() })
			warmPool(t, rdb, 8)
			hold := &holdResends{px: px}
			rdb.AddHook(hold)
			inv := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
			ord := orders.NewStore(rdb, keys)

			// Every reply is dropped from here on; the first send still reaches Redis and runs.
			addToxic(t, px, `{"name":"drop","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`)
			err = c.do(inv, ord, item, order)
			if !errors.Is(err, exactlyonce.ErrOutcomeUnknown) {
				t.Fatalf("with every reply dropped the call answered %v, want the outcome unknown", err)
			}
			callKey, resends := hold.result()
			if callKey == "" || resends == 0 {
				t.Fatalf("the call was never re-sent (record %q, %d re-sends)", callKey, resends)
			}
			// The re-sends wait in the proxy until the first run's call record is gone.
			waitFor(t, "the call record to expire", 3*time.Minute, func() bool {
				return direct.Exists(ctx, callKey).Val() == 0
			})
			before := scriptCalls(t, direct)
			if err := px.Toxics.RemoveToxic(ctx, "hold"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "a late re-send to reach Redis", time.Minute, func() bool {
				return scriptCalls(t, direct) > before
			})
			c.check(t, w, item)
		})
	}
}

// holdResends is a go-redis hook that, once the first script send has failed (its reply was
// dropped), adds an upstream toxic that holds every later send in the proxy. It notes the
// call record key of the first send.
type holdResends struct {
	px *toxiproxy.Proxy

	mu      sync.Mutex
	callKey string
	sends   int
}

func (h *holdResends) result() (string, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.callKey, h.sends - 1
}

func (h *holdResends) DialHook(next redis.DialHook) redis.DialHook { return next }

// A purchase's script goes in a pipeline with its index writes (RunWith); the other scripts
// alone.
func (h *holdResends) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.sent(cmd)
		}
		return err
	}
}

func (h *holdResends) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.sent(cmd)
		return err
	}
}

// sent counts a script send; after the first it holds every later send in the proxy.
func (h *holdResends) sent(cmd redis.Cmder) {
	if name := cmd.Name(); name != "evalsha" && name != "eval" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sends++
	if h.sends == 1 {
		args := cmd.Args()
		nkeys, _ := strconv.Atoi(fmt.Sprint(args[2]))
		h.callKey = fmt.Sprint(args[2+nkeys]) // the call record key is the last key
		// 10 minutes: far past the record's life; removing the toxic releases the sends.
		if _, terr := h.px.Toxics.AddToxicJson(strings.NewReader(
			`{"name":"hold","type":"latency","stream":"upstream","attributes":{"latency":600000}}`)); terr != nil {
			panic(terr)
		}
	}
}

// warmPool opens n connections and returns them to rdb's pool idle, so the re-sends go out on
// connections that are already set up: a new connection's handshake (HELLO) would be held in
// the proxy in place of the re-send itself.
func warmPool(t *testing.T, rdb redis.UniversalClient, n int) {
	t.Helper()
	c, ok := rdb.(*redis.Client)
	if !ok {
		t.Fatalf("want a single-node client, got %T", rdb)
	}
	conns := make([]*redis.Conn, n)
	for i := range conns {
		conns[i] = c.Conn()
		if err := conns[i].Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, cn := range conns {
		cn.Close()
	}
	if idle := c.PoolStats().IdleConns; idle < uint32(n) {
		t.Fatalf("%d idle connections after warming %d", idle, n)
	}
}

func addToxic(t *testing.T, px *toxiproxy.Proxy, spec string) {
	t.Helper()
	if _, err := px.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		t.Fatalf("toxic %s: %v", spec, err)
	}
}

var scriptCallsRe = regexp.MustCompile(`cmdstat_(?:evalsha|eval):calls=(\d+)`)

// scriptCalls is how many script calls (EVALSHA and EVAL) the server has executed.
func scriptCalls(t *testing.T, rdb redis.UniversalClient) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range scriptCallsRe.FindAllStringSubmatch(info, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

// waitFor polls cond until it holds, or fails the test when within passes.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s after %v", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
