package record_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"gorm.io/gorm"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/kafkabroker"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/outbox"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

const topic = "flashsale.orders"

// pipeline is the whole path on real servers: scripts in Redis -> relay -> kfake over TCP ->
// consumer group -> Postgres.
type pipeline struct {
	t       testing.TB
	rdb     redis.UniversalClient
	keys    keyspace.Space
	inv     *inventory.Store
	ord     *orders.Store
	broker  *kafkabroker.Broker
	db      *gorm.DB
	items   []string
	adjusts atomic.Int64 // successful stock adjustments (each one event)
}

func newPipeline(t testing.TB, ttl time.Duration, items ...string) *pipeline {
	rdb, keys := testenv.Redis(t)
	p := &pipeline{
		t: t, rdb: rdb, keys: keys, items: items,
		inv:    inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{ReservationTTL: ttl})),
		ord:    orders.NewStore(rdb, keys),
		broker: testenv.Kafka(t, topic, 3),
		db:     openDB(t),
	}
	for _, id := range items {
		stock := int64(300)
		if _, _, err := p.inv.Upsert(context.Background(), inventory.Input{
			ID: id, Name: "Item " + id, Category: "c", PriceCents: 1999, Stock: &stock, PerUserLimit: 6,
		}); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func (p *pipeline) relay(opt outbox.Options) *outbox.Relay {
	w := outbox.NewWriter([]string{p.broker.Addr()}, topic)
	p.t.Cleanup(func() { w.Close() })
	return outbox.New(p.rdb, p.keys, w, opt)
}

func (p *pipeline) consumer(opt record.ConsumerOptions) *record.Consumer {
	opt.Brokers, opt.Topic = []string{p.broker.Addr()}, topic
	if opt.LagInterval == 0 {
		opt.LagInterval = 500 * time.Millisecond
	}
	return record.NewConsumer(p.db, opt)
}

// run starts fn in a goroutine until the test ends or stop is called. stop cancels it and
// returns its error; wait only waits for it to return by itself.
func run(t testing.TB, fn func(context.Context) error) (stop, wait func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	var err error
	go func() { err = fn(ctx); close(finished) }()
	wait = func() error { <-finished; return err }
	stop = func() error { cancel(); return wait() }
	t.Cleanup(func() { _ = stop() })
	return stop, wait
}

// expirer runs the order expirer until the test ends.
func (p *pipeline) expirer() (stop func() error) {
	e := orders.NewExpirer(p.ord, 50*time.Millisecond, 200)
	stop, _ = run(p.t, func(ctx context.Context) error { e.Run(ctx); return nil })
	return stop
}

// sale runs purchases by workers goroutines; each reservation is then paid, cancelled or left
// to expire, and every 25th operation adjusts stock. halfway is called once, mid-sale.
func (p *pipeline) sale(purchases, workers int, halfway func()) {
	var wg sync.WaitGroup
	var started atomic.Int64
	var once sync.Once
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := w; i < purchases; i += workers {
				if started.Add(1) == int64(purchases/2) && halfway != nil {
					once.Do(halfway)
				}
				item := p.items[rng.IntN(len(p.items))]
				if i%25 == 0 {
					delta := int64(rng.IntN(20) - 5)
					if delta == 0 {
						delta = 1
					}
					if _, err := p.inv.AdjustStock(ctx, item, delta); err == nil {
						p.adjusts.Add(1)
					} else if !errors.Is(err, inventory.ErrInvalidState) {
						p.t.Errorf("adjust: %v", err)
					}
					continue
				}
				user := "u" + strconv.Itoa(rng.IntN(120))
				res, err := p.inv.Purchase(ctx, inventory.PurchaseRequest{ItemID: item, UserID: user, Quantity: 1 + rng.Int64N(3)})
				if err != nil {
					if !errors.Is(err, inventory.ErrSoldOut) && !errors.Is(err, inventory.ErrLimitExceeded) {
						p.t.Errorf("purchase: %v", err)
					}
					continue
				}
				switch r := rng.IntN(100); {
				case r < 45:
					_, err = p.ord.Pay(ctx, user, res.Order.ID)
				case r < 70:
					_, err = p.ord.Cancel(ctx, user, res.Order.ID)
				}
				if err != nil && !errors.Is(err, orders.ErrExpired) {
					p.t.Errorf("pay/cancel: %v", err)
				}
			}
		}()
	}
	wg.Wait()
}

// settle waits until no reservation is left (all paid, cancelled or expired), so Redis stops
// changing and can be compared with Postgres.
func (p *pipeline) settle() {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var left int64
		for _, id := range p.items {
			left += p.rdb.ZCard(context.Background(), p.keys.Item(id).Expiry()).Val()
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%d reservations never expired", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type orderRec struct {
	Item, User   string
	Qty          int64
	Status       string
	ID           string
	Price        int64
	CreatedMilli int64
}

// redisTruth reads every order and item counter from Redis.
func (p *pipeline) redisTruth() (map[string]orderRec, map[string]map[string]string) {
	ctx := context.Background()
	out := map[string]orderRec{}
	hashes := map[string]map[string]string{}
	for _, id := range p.items {
		recs, err := p.rdb.HGetAll(ctx, p.keys.Item(id).Orders()).Result()
		if err != nil {
			p.t.Fatal(err)
		}
		for oid, packed := range recs {
			o, err := orders.Unpack(oid, id, packed)
			if err != nil {
				p.t.Fatal(err)
			}
			out[oid] = orderRec{ID: oid, Item: id, User: o.UserID, Qty: o.Quantity, Status: string(o.Status), Price: o.PriceCents, CreatedMilli: o.CreatedAt.UnixMilli()}
		}
		hashes[id] = p.rdb.HGetAll(ctx, p.keys.Item(id).Hash()).Val()
	}
	return out, hashes
}

// diff compares Postgres with Redis; "" means equal.
func (p *pipeline) diff() string {
	want, hashes := p.redisTruth()
	var rows []record.Order
	if err := p.db.Find(&rows).Error; err != nil {
		return err.Error()
	}
	var problems []string
	if len(rows) != len(want) {
		problems = append(problems, fmt.Sprintf("postgres has %d orders, redis %d", len(rows), len(want)))
	}
	paid := map[string]int64{}
	for _, o := range rows {
		w, ok := want[o.ID]
		got := orderRec{ID: o.ID, Item: o.ItemID, User: o.UserID, Qty: o.Quantity, Status: o.Status, Price: o.PriceCents, CreatedMilli: o.CreatedAt.UnixMilli()}
		if !ok || w != got {
			problems = append(problems, fmt.Sprintf("order %s: postgres %+v, redis %+v", o.ID, got, w))
		}
		if o.Status == "paid" {
			paid[o.ItemID] += o.Quantity
		}
	}
	var items []record.Item
	p.db.Find(&items)
	gotItems := map[string]record.Item{}
	for _, it := range items {
		gotItems[it.ID] = it
	}
	for _, id := range p.items {
		h := hashes[id]
		it := gotItems[id]
		if strconv.FormatInt(it.StockTotal, 10) != h["stock_total"] || it.Name != h["name"] {
			problems = append(problems, fmt.Sprintf("item %s: postgres %+v, redis %v", id, it, h))
		}
		if strconv.FormatInt(paid[id], 10) != h["paid"] {
			problems = append(problems, fmt.Sprintf("item %s: %d units paid in postgres, redis %s", id, paid[id], h["paid"]))
		}
	}
	sort.Strings(problems)
	if len(problems) > 5 {
		problems = append(problems[:5], fmt.Sprintf("... %d more", len(problems)-5))
	}
	return strings.Join(problems, "\n")
}

// waitEqual waits until Postgres holds what Redis holds, then checks the record has every
// event exactly once: one processed event per change, one stock movement per reservation
// and per return, and movements that add up to the units sold.
func (p *pipeline) waitEqual() {
	p.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		d := p.diff()
		if d == "" {
			break
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("postgres never matched redis:\n%s", d)
		}
		time.Sleep(100 * time.Millisecond)
	}
	want, hashes := p.redisTruth()
	var terminal int64
	for _, o := range want {
		if o.Status != "reserved" {
			terminal++
		}
	}
	events := int64(len(p.items)) + p.adjusts.Load() + int64(len(want)) + terminal
	deadline = time.Now().Add(30 * time.Second)
	for {
		var processed int64
		p.db.Model(&record.ProcessedEvent{}).Count(&processed)
		if processed == events {
			break
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("processed_events has %d rows, %d events were written", processed, events)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, id := range p.items {
		var reserved, returned, sum int64
		p.db.Model(&record.StockMovement{}).Where("item_id = ? AND kind = 'reserved'", id).Count(&reserved)
		p.db.Model(&record.StockMovement{}).Where("item_id = ? AND kind = 'returned'", id).Count(&returned)
		p.db.Model(&record.StockMovement{}).Where("item_id = ? AND kind <> 'adjusted'", id).Select("coalesce(sum(delta), 0)").Scan(&sum)
		var orders, ended int64
		for _, o := range want {
			if o.Item == id {
				orders++
				if o.Status == "cancelled" || o.Status == "expired" {
					ended++
				}
			}
		}
		h := hashes[id]
		sold, _ := strconv.ParseInt(h["paid"], 10, 64)
		held, _ := strconv.ParseInt(h["reserved"], 10, 64)
		if reserved != orders || returned != ended || -sum != sold+held {
			p.t.Fatalf("item %s movements: %d reserved (orders %d), %d returned (ended %d), net %d (sold+held %d)",
				id, reserved, orders, returned, ended, -sum, sold+held)
		}
	}
	var dead int64
	p.db.Model(&record.DeadLetter{}).Count(&dead)
	p.t.Logf("%d orders, %d events, each in postgres exactly once; %d dead letters", len(want), events, dead)
}

// TestPipelineEndToEnd: thousands of concurrent purchases, payments, cancellations and
// expiries across several items; Postgres ends equal to Redis, order for order.
func TestPipelineEndToEnd(t *testing.T) {
	p := newPipeline(t, 700*time.Millisecond, "a", "b", "c", "d", "e")
	run(t, p.relay(outbox.Options{}).Run)
	c := p.consumer(record.ConsumerOptions{})
	run(t, c.Run)
	stopExpirer := p.expirer()
	p.sale(4000, 48, nil)
	p.settle()
	_ = stopExpirer()
	p.waitEqual()
	if st := c.Stats(); st.Duplicates != 0 || st.Invalid != 0 {
		t.Fatalf("no failure, yet %+v", st)
	}
	waitNoLag(t, c)
}

// waitNoLag waits until the consumer group has committed everything on the topic.
func waitNoLag(t testing.TB, c *record.Consumer) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		lag, err := c.MeasureLag(context.Background())
		if err == nil && lag == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer lag %d (%v) after the record matched", lag, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPipelineKafkaOutage: the broker goes down mid-sale; selling goes on, events wait in
// Redis; the broker comes back on the same port and the record catches up exactly.
func TestPipelineKafkaOutage(t *testing.T) {
	p := newPipeline(t, 700*time.Millisecond, "a", "b", "c")
	r := p.relay(outbox.Options{})
	run(t, r.Run)
	c := p.consumer(record.ConsumerOptions{})
	run(t, c.Run)
	stopExpirer := p.expirer()
	p.sale(3000, 32, func() { p.broker.Stop() })
	p.settle()
	_ = stopExpirer()
	if r.Stats().Failures == 0 {
		t.Fatal("the relay never saw the outage")
	}
	var waiting int64
	for _, id := range p.items {
		waiting += p.rdb.XLen(context.Background(), p.keys.Item(id).Outbox()).Val()
	}
	if waiting == 0 {
		t.Fatal("no event waited in Redis during the outage")
	}
	t.Logf("%d events waited in Redis during the outage", waiting)
	if err := p.broker.Restart(); err != nil {
		t.Fatal(err)
	}
	p.waitEqual()
	waitNoLag(t, c) // the group recovers its coordinator and commits again
}

// TestPipelineCrashes: the relay dies between Kafka's ack and its Redis ack, the consumer
// between its transaction and its offset commit; successors re-publish and re-consume, and the
// record absorbs every duplicate. Both crash once the sale is half done: an event, not a batch
// count, which a loaded machine making fewer, bigger batches might never reach.
func TestPipelineCrashes(t *testing.T) {
	p := newPipeline(t, 700*time.Millisecond, "a", "b", "c")
	crash := errors.New("simulated crash")

	var armed, relayCrashed, consumerCrashed atomic.Bool
	doomedRelay := p.relay(outbox.Options{Consumer: "doomed", AfterPublish: func(int) error {
		if armed.Load() && relayCrashed.CompareAndSwap(false, true) {
			return crash
		}
		return nil
	}})
	heir := p.relay(outbox.Options{Consumer: "heir", ClaimIdle: 300 * time.Millisecond, ClaimInterval: 100 * time.Millisecond})
	_, relayDone := run(t, doomedRelay.Run)
	doomedConsumer := p.consumer(record.ConsumerOptions{AfterCommit: func(record.Result) error {
		if armed.Load() && consumerCrashed.CompareAndSwap(false, true) {
			return crash
		}
		return nil
	}})
	_, consumerDone := run(t, doomedConsumer.Run)
	successor := p.consumer(record.ConsumerOptions{})
	var successorStarted atomic.Bool
	go func() {
		if err := consumerDone(); !errors.Is(err, crash) {
			t.Errorf("doomed consumer: %v", err)
		}
		successorStarted.Store(true)
		run(t, successor.Run)
	}()
	go func() {
		if err := relayDone(); !errors.Is(err, crash) {
			t.Errorf("doomed relay: %v", err)
		}
		run(t, heir.Run)
	}()

	stopExpirer := p.expirer()
	p.sale(3000, 32, func() { armed.Store(true) })
	p.settle()
	_ = stopExpirer()
	p.waitEqual()
	// The crashed relay's entries already reached Kafka before it died, so the record can be
	// complete before the heir's claim timer fires: wait for the claim, then check again that
	// the re-published duplicates changed nothing.
	for deadline := time.Now().Add(15 * time.Second); heir.Stats().Claimed == 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if heir.Stats().Claimed == 0 {
		t.Fatal("the heir relay claimed nothing from the crashed one")
	}
	p.waitEqual()
	if !successorStarted.Load() || successor.Stats().Duplicates == 0 {
		t.Fatalf("the successor consumer absorbed no duplicates: %+v", successor.Stats())
	}
	t.Logf("relay re-published %d, consumer absorbed %d duplicates", heir.Stats().Claimed, successor.Stats().Duplicates)
}

// TestPipelinePoison: garbage on the topic, and an event Postgres refuses (a NUL in a name),
// are parked in dead_letters, counted, and the consumer goes on with the events behind them:
// one bad event never stops a partition.
func TestPipelinePoison(t *testing.T) {
	p := newPipeline(t, time.Hour, "a", "b")
	run(t, p.relay(outbox.Options{}).Run)
	c := p.consumer(record.ConsumerOptions{})
	run(t, c.Run)
	w := &kafka.Writer{Addr: kafka.TCP(p.broker.Addr()), Topic: topic, Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond}
	defer w.Close()
	poison := []kafka.Message{
		{Key: []byte("a"), Value: []byte("{not json")},
		{Key: []byte("b"), Value: []byte(`{"event_id":"b/1-0","type":"order.refunded","at":"2026-01-01T00:00:00Z","item_id":"b"}`)},
		{Key: []byte("a"), Value: []byte(`{"event_id":"a/1-0","type":"order.paid","at":"2026-01-01T00:00:00Z","item_id":"a","order_id":"a.1"}`)},
		{Key: []byte("a"), Value: []byte(`{"event_id":"a/2-0","type":"item.upserted","at":"2026-01-01T00:00:00Z","item_id":"a","name":"a\u0000b","category":"c","price_cents":1,"stock_total":1,"per_user_limit":1}`)},
	}
	p.sale(300, 8, func() {
		if err := w.WriteMessages(context.Background(), poison...); err != nil {
			t.Errorf("write poison: %v", err)
		}
	})
	p.waitEqual()
	var dead []record.DeadLetter
	p.db.Find(&dead)
	if len(dead) != len(poison) || c.Stats().Invalid != int64(len(poison)) {
		t.Fatalf("%d dead letters, %d counted invalid; want %d", len(dead), c.Stats().Invalid, len(poison))
	}
	for _, d := range dead {
		if d.Error == "" || d.Topic != topic {
			t.Fatalf("dead letter without its reason: %+v", d)
		}
	}
}

// TestConsumerStopsCleanly: stopped (SIGTERM) once it wrote everything, the consumer has
// committed the offsets of what it wrote and leaves no goroutine behind.
func TestConsumerStopsCleanly(t *testing.T) {
	p := newPipeline(t, time.Hour, "a", "b")
	stopRelay, _ := run(t, p.relay(outbox.Options{}).Run)
	p.sale(200, 4, nil)
	deadline := time.Now().Add(60 * time.Second)
	for {
		var left int64
		for _, id := range p.items {
			left += p.rdb.XLen(context.Background(), p.keys.Item(id).Outbox()).Val()
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events never left the outbox", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := stopRelay(); err != nil {
		t.Fatal(err)
	}
	_ = p.diff() // the pool's connection cleaner starts with its first connection, not the consumer's
	before := runtime.NumGoroutine()
	c := p.consumer(record.ConsumerOptions{LagInterval: 10 * time.Millisecond})
	stop, _ := run(t, c.Run)
	p.waitEqual()
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Run, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Lag from a client of the test's own: every event written is committed.
	if lag, err := p.consumer(record.ConsumerOptions{}).MeasureLag(context.Background()); err != nil || lag != 0 {
		t.Fatalf("lag after a clean stop: %d %v; want every written event committed", lag, err)
	}
}
