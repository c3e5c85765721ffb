package reconcile_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/outbox"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

const topic = "flashsale.orders"

// env is a whole pipeline: Redis, the relay, a kfake broker over TCP, the consumer writing
// Postgres, and a Reconciler over them.
type env struct {
	t       testing.TB
	ctx     context.Context
	rdb     redis.UniversalClient
	keys    keyspace.Space
	dsn     string
	db      *pgxpool.Pool   // the tests' own SQL
	rec     *record.Queries // what the reconciler reads
	brokers []string
	inv     *inventory.Store
	ord     *orders.Store
	pipe    *reconcile.KafkaPipeline
	// stopPipeline stops the relay and the consumer startPipeline started (once).
	stopPipeline func()
}

func newEnv(t testing.TB) *env {
	rdb, keys := testenv.Redis(t)
	return newEnvOn(t, rdb, keys)
}

func newEnvOn(t testing.TB, rdb redis.UniversalClient, keys keyspace.Space) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), rdb: rdb, keys: keys}
	e.dsn = testenv.Postgres(t)
	b := testenv.Kafka(t, topic, 3)
	e.brokers = []string{b.Addr()}
	db, err := pgxpool.New(context.Background(), e.dsn) // the tests' own SQL
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	e.db = db
	if e.rec, err = record.OpenQueries(e.dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.rec.Close)
	e.inv = inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{ReservationTTL: time.Hour}))
	e.ord = orders.NewStore(rdb, keys)
	e.pipe = reconcile.NewKafkaPipeline(e.brokers, topic, "reconciler", nil)
	e.startPipeline()
	return e
}

// startPipeline runs a relay and a consumer until the test ends or stopPipeline.
func (e *env) startPipeline() {
	gdb, err := record.Open(e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := outbox.NewWriter(e.brokers, topic)
	relay := outbox.New(e.rdb, e.keys, w, outbox.Options{
		Block: 50 * time.Millisecond,
	})
	cons := record.NewConsumer(gdb, record.ConsumerOptions{
		Brokers: e.brokers, Topic: topic, BatchWait: 5 * time.Millisecond,
	})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = relay.Run(ctx) }()
	go func() { defer wg.Done(); _ = cons.Run(ctx) }()
	var once sync.Once
	e.stopPipeline = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			_ = w.Close()
			if db, err := gdb.DB(); err == nil {
				db.Close()
			}
		})
	}
	e.t.Cleanup(e.stopPipeline)
}

func (e *env) reconciler(opt reconcile.Options) *reconcile.Reconciler {
	if opt.Pipeline == nil {
		opt.Pipeline = e.pipe
	}
	if opt.SettleTimeout == 0 {
		opt.SettleTimeout = 30 * time.Second
	}
	return reconcile.New(e.rdb, e.keys, e.rec, options.Reconcile(opt))
}

func (e *env) item(id string, stock, limit int64) {
	e.t.Helper()
	if _, _, err := e.inv.Upsert(e.ctx, inventory.Input{ID: id, Name: "item " + id, Category: "c",
		PriceCents: 250, Stock: &stock, PerUserLimit: limit}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) buy(item, user string, qty int64) orders.Order {
	e.t.Helper()
	o, ok := e.tryBuy(item, user, qty)
	if !ok {
		e.t.FailNow()
	}
	return o
}

// tryBuy is buy for other goroutines than the test's (FailNow may only run on the test's
// own): a failed purchase is reported and ok is false.
func (e *env) tryBuy(item, user string, qty int64) (orders.Order, bool) {
	e.t.Helper()
	res, err := e.inv.Purchase(e.ctx, inventory.PurchaseRequest{ItemID: item, UserID: user, Quantity: qty})
	if err != nil {
		e.t.Errorf("buy %s by %s: %v", item, user, err)
		return orders.Order{}, false
	}
	return res.Order, true
}

// drain waits until every outbox stream (the items' and the ranking slot's) is empty and the consumer has committed everything.
func (e *env) drain() {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ids, _ := e.rdb.SMembers(e.ctx, e.keys.Catalog()).Result()
		backlog := e.rdb.XLen(e.ctx, e.keys.RankOutbox()).Val()
		for _, id := range ids {
			backlog += e.rdb.XLen(e.ctx, e.keys.Item(id).Outbox()).Val()
		}
		lag, err := e.pipe.Lag(e.ctx)
		if err == nil && backlog == 0 && lag == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("pipeline did not drain: backlog %d lag %d err %v", backlog, lag, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.db.Exec(e.ctx, sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func driftKeys(ds []reconcile.Drift) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmt.Sprintf("%s %s %s %s", d.Kind, d.ItemID, d.OrderID, d.Field)
	}
	return out
}
