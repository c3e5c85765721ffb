package inventory_test

import (
	"context"
	"net"
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
	"github.com/flashsale/flashsale/internal/redisconn"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// After a failover the catalogue serves the new primary's stock and status, although its
// versions are behind the deposed primary's: the replica is promoted (REPLICAOF NO ONE) while
// the old primary goes on selling through this api, then the api's connections move to the
// promoted replica (a proxy's upstream switched, as a failover moves them).
func TestCatalogueFollowsThePrimaryOfRecord(t *testing.T) {
	r := testenv.ReplicatedRedis(t, 1)
	ctx := context.Background()
	toxics := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	px := toxiproxy.NewProxy(toxics, "primary", "127.0.0.1:0", r.Primary.Addr)
	if err := px.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Stop)
	rdb, err := redisconn.Open(ctx, []string{px.Listen}, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	if err := exactlyonce.Load(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	keys := keyspace.Space{Prefix: "t" + testenv.Token(4) + ":"}
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{SnapshotInterval: 100 * time.Millisecond}))
	loop, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.RunSnapshot(loop) }()
	t.Cleanup(func() { stop(); wg.Wait() })

	newItem(t, s, "hot", 5, 5)
	newItem(t, s, "calm", 10, 10)
	r.WaitInSync(t, r.Primary, 1)
	promoted := r.Replicas[0]
	if err := promoted.Client().ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	// The deposed primary sells hot out and calm down to 7; this api's snapshot shows it.
	for _, p := range []struct {
		item string
		n    int
	}{{"hot", 5}, {"calm", 3}} {
		for i := range p.n {
			if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: p.item, UserID: "u" + string(rune('a'+i)), Quantity: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	testenv.WaitFor(t, "the catalogue serves the deposed primary's sales", 30*time.Second, func() bool {
		return lookup(t, s, "hot").Status == inventory.StatusSoldOut && lookup(t, s, "calm").StockLeft == 7
	})

	// The api's connections move to the promoted replica.
	listen := px.Listen
	px.Stop()
	px.Listen, px.Upstream = listen, promoted.Addr
	if err := px.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the catalogue serves the promoted primary's stock and status", 30*time.Second, func() bool {
		hot, err1 := s.Lookup(ctx, "hot")
		calm, err2 := s.Lookup(ctx, "calm")
		return err1 == nil && err2 == nil && hot.Status == inventory.StatusLive && hot.StockLeft == 5 && calm.StockLeft == 10
	})
	// Sales on the new primary show too, although their versions are below the deposed
	// primary's.
	if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "calm", UserID: "v", Quantity: 2}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the catalogue serves a sale on the new primary", 30*time.Second, func() bool {
		items, err := s.List(ctx)
		return err == nil && len(items) == 2 && items[0].StockLeft == 8 && items[1].StockLeft == 5
	})
}

func lookup(t *testing.T, s *inventory.Store, id string) inventory.Item {
	t.Helper()
	it, err := s.Lookup(context.Background(), id)
	if err != nil {
		t.Fatalf("lookup %s: %v", id, err)
	}
	return it
}

// Every call the catalogue makes to Redis carries a deadline, whatever its caller's context,
// so a refresh stuck on a primary that was cut off cannot hold the purchases that look their
// item up (each refresh here: the snapshot interval is shorter than the reads' spacing).
func TestCatalogueCallsHaveDeadlines(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{SnapshotInterval: time.Millisecond}))
	newItem(t, s, "a", 10, 5)
	d := &deadlines{}
	rdb.AddHook(d)
	// The first read loads the catalogue; later ones, past the interval, read the change logs.
	testenv.WaitFor(t, "three catalogue refreshes", 30*time.Second, func() bool {
		if _, err := s.List(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Lookup(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if s.Known(ctx, "made-up") {
			t.Fatal("a made-up id is known")
		}
		return d.pipelines() >= 3
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.calls == 0 || len(d.without) > 0 {
		t.Fatalf("%d calls, these without a deadline: %q", d.calls, d.without)
	}
}

// deadlines records the Redis calls (and dials) whose context has no deadline.
type deadlines struct {
	mu      sync.Mutex
	calls   int
	piped   int
	without []string
}

func (d *deadlines) pipelines() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.piped
}

func (d *deadlines) note(ctx context.Context, what string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	if _, ok := ctx.Deadline(); !ok {
		d.without = append(d.without, what)
	}
}

func (d *deadlines) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.note(ctx, "dial")
		return next(ctx, network, addr)
	}
}

func (d *deadlines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		d.note(ctx, cmd.Name())
		return next(ctx, cmd)
	}
}

func (d *deadlines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		d.note(ctx, "pipeline")
		d.mu.Lock()
		d.piped++
		d.mu.Unlock()
		return next(ctx, cmds)
	}
}
