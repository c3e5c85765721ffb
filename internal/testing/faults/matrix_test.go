//go:build faults

package faults

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/testing/testenv/procs"
)

// workload is what shoppers do during a fault: each shopper buys one unit of an item (with an
// Idempotency-Key when keyed(i)), then pays (40%), cancels (20%) or leaves the reservation.
type workload struct {
	users   []string
	items   []string
	keyed   func(i int) bool
	workers int
	// when is called once when at purchases have been answered: the fault (an event of the
	// sale, never a point in time). The worker that reaches the count runs it while the
	// others go on buying. more are further faults at further counts.
	at   int
	when func()
	more map[int]func()
	// patient: a keyed purchase answered 503 (either kind) or not at all is sent again with its
	// key for up to this long (procs.Shop.BuyPatiently); 0: up to 5 times on an unknown outcome.
	patient time.Duration
}

func (s *sale) run(w workload) {
	var answered atomic.Int64
	var once sync.Once
	idx := make([]int, len(w.users))
	for i := range idx {
		idx[i] = i
	}
	if w.workers == 0 {
		w.workers = 64
	}
	procs.Parallel(w.workers, idx, func(i int) {
		u := w.users[i]
		item := w.items[i%len(w.items)]
		key := ""
		if w.keyed != nil && w.keyed(i) {
			key = "k-" + u
		}
		var c *procs.Call
		if w.patient > 0 && key != "" {
			c = s.shop.BuyPatiently(procs.Any, u, item, key, w.patient)
		} else {
			c = s.shop.Buy(procs.Any, u, item, key)
		}
		n := int(answered.Add(1))
		if n == w.at && w.when != nil {
			once.Do(w.when)
		}
		if f := w.more[n]; f != nil {
			f() // each count is reached once
		}
		if c.Status == 201 {
			switch i % 5 {
			case 0, 1:
				s.shop.Order(procs.Any, "pay", u, c.OrderID)
			case 2:
				s.shop.Order(procs.Any, "cancel", u, c.OrderID)
			}
		}
	})
}

// recovery is the time from the fault's end to the first purchase begun after it that got a
// real answer (created, or a refusal such as sold out).
func (s *sale) recovery(end time.Time) time.Duration {
	best := time.Duration(0) // no purchase began after the fault: nothing waited
	for _, c := range s.shop.Calls() {
		if c.Kind != "purchase" || c.Started.Before(end) || c.Unknown() || c.Status == 503 {
			continue
		}
		if d := c.Started.Add(c.Took).Sub(end); best == 0 || d < best {
			best = d
		}
	}
	return best
}

func itemIDs(items map[string]int) []string {
	out := make([]string, 0, len(items))
	for id := range items {
		out = append(out, id)
	}
	return out
}

// setupItems creates n items of the given stock with per-user limit 1.
func (s *sale) setupItems(n, stock int) map[string]int {
	items := map[string]int{}
	for i := range n {
		id := "it" + strconv.Itoa(i)
		s.shop.PutItem(id, stock, 1)
		items[id] = 1
	}
	return items
}

// Redis stalls 3.5 s (DEBUG SLEEP, longer than a send's 2 s timeout) while 2,000 shoppers buy,
// half with an Idempotency-Key: the api re-sends, the call record answers the re-sends, and
// nobody gets two orders or an order they were not told of.
func TestRedisStall(t *testing.T) {
	s := newSale(t, saleOptions{})
	s.startAPI()
	s.startReconciler()
	items := s.setupItems(4, 400)
	users := s.login("s", 2000)
	var end time.Time
	stalled := make(chan struct{})
	s.run(workload{users: users, items: itemIDs(items), keyed: func(i int) bool { return i%2 == 0 }, at: 300,
		when: func() {
			go func() {
				defer close(stalled)
				if err := s.rdb.Do(context.Background(), "DEBUG", "SLEEP", "3.5").Err(); err != nil {
					t.Errorf("DEBUG SLEEP: %v", err)
				}
				end = time.Now()
			}()
		}})
	<-stalled
	s.felt("the stall")
	f := s.verify(items)
	f.recover = s.recovery(end)
	report(t, "Redis stalls 3.5 s (DEBUG SLEEP)", f)
}

// Every api<->Redis connection is reset (the proxy drops them all) three times while shoppers
// buy: calls in flight are re-sent on new connections.
func TestRedisConnectionsReset(t *testing.T) {
	s := newSale(t, saleOptions{})
	s.startAPI()
	s.startReconciler()
	items := s.setupItems(4, 300)
	users := s.login("r", 1000)
	var end time.Time
	// Each reset: the proxy drops every connection, so calls in flight lose theirs mid-batch,
	// and takes new ones at once.
	reset := func() {
		s.redisPx.Stop()
		if err := s.redisPx.Start(); err != nil {
			t.Errorf("proxy restart: %v", err)
		}
		end = time.Now()
	}
	s.run(workload{users: users, items: itemIDs(items), keyed: func(i int) bool { return i%2 == 0 },
		at: 150, when: reset, more: map[int]func(){300: reset, 450: reset}})
	s.felt("resets")
	f := s.verify(items)
	f.recover = s.recovery(end)
	report(t, "every api-Redis connection reset (x3)", f)
}

// 0-800 ms of latency between the api and Redis while shoppers buy, pay and cancel,
// reservations expire (3 s) and an admin restocks.
func TestRedisLatencyJitter(t *testing.T) {
	s := newSale(t, saleOptions{reservationTTL: 3 * time.Second})
	s.startAPI()
	s.startReconciler()
	items := s.setupItems(3, 150)
	users := s.login("j", 600)
	s.addToxic(s.redisPx, `{"name":"jitter","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":400,"jitter":400}}`)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 10 {
			s.shop.Restock(procs.Any, itemIDs(items)[i%len(items)], 5)
		}
	}()
	s.run(workload{users: users, items: itemIDs(items), keyed: func(i int) bool { return i%2 == 0 }})
	wg.Wait()
	s.removeToxic(s.redisPx, "jitter")
	end := time.Now()
	// Every reservation left unpaid expires (3 s) before the record is compared.
	s.waitNoReservations(items, 60*time.Second)
	f := s.verify(items)
	f.recover = s.recovery(end)
	report(t, "0-800 ms latency api-Redis", f)
}

// Redis is killed (kill -9) while shoppers buy and restarted from its AOF (appendfsync
// always): nothing it acknowledged is lost, and calls cut off are re-sent or answered 503.
func TestRedisKilledAndRestarted(t *testing.T) {
	s := newSale(t, saleOptions{})
	s.startAPI()
	s.startReconciler()
	items := s.setupItems(4, 300)
	users := s.login("k", 1000)
	var end time.Time
	s.run(workload{users: users, items: itemIDs(items), keyed: func(i int) bool { return i%2 == 0 }, at: 300,
		when: func() { s.killRedis(); s.restartRedis(); end = time.Now() }}) // the others buy on
	s.felt("the kill")
	f := s.verify(items)
	f.recover = s.recovery(end)
	report(t, "Redis kill -9, restarted from its AOF", f)
}

// One of two apis is killed (kill -9) while shoppers buy through both: the other keeps
// selling, expiring (5 s reservations) and relaying, including the dead one's claimed events.
func TestAPIKilled(t *testing.T) {
	s := newSale(t, saleOptions{reservationTTL: 5 * time.Second})
	a := s.startAPI()
	s.startAPI()
	s.startReconciler()
	items := s.setupItems(4, 300)
	users := s.login("a", 1000)
	var end time.Time
	s.run(workload{users: users, items: itemIDs(items), keyed: func(i int) bool { return i%2 == 0 }, at: 300,
		when: func() { a.Kill9(); end = time.Now() }})
	s.waitNoReservations(items, 90*time.Second)
	f := s.verify(items)
	f.recover = s.recovery(end)
	report(t, "one of two apis kill -9", f)
}

// One of two apis and the reconciler are stopped with SIGTERM mid-sale, the api after the
// shop (standing for a load balancer that saw /readyz answer 503) stopped sending to it: both
// exit 0 having drained, the other api sells on, a new reconciler takes over the group, and
// the record completes with every answer kept.
func TestGracefulStop(t *testing.T) {
	s := newSale(t, saleOptions{reservationTTL: 5 * time.Second})
	a := s.startAPI("FLASHSALE_SHUTDOWN_DRAIN=1s")
	s.startAPI()
	rec := s.startReconciler()
	items := s.setupItems(4, 300)
	users := s.login("g", 1000)
	s.run(workload{users: users, items: itemIDs(items), keyed: func(i int) bool { return i%2 == 0 }, at: 300,
		when: func() {
			a.Stop(syscall.SIGTERM)
			rec.Stop(syscall.SIGTERM)
		}})
	if code := a.ExitCode(60 * time.Second); code != 0 || !a.Logged(`"msg":"shutdown complete"`) || !a.Logged(`"requests_cut":false`) {
		t.Fatalf("api after SIGTERM: exit %d, shutdown complete %v, no request cut %v", code,
			a.Logged(`"msg":"shutdown complete"`), a.Logged(`"requests_cut":false`))
	}
	if code := rec.ExitCode(60 * time.Second); code != 0 || !rec.Logged(`"msg":"reconciler stopped"`) {
		t.Fatalf("reconciler after SIGTERM: exit %d, stopped cleanly %v", code, rec.Logged(`"msg":"reconciler stopped"`))
	}
	s.startReconciler()
	s.waitNoReservations(items, 90*time.Second)
	f := s.verify(items)
	report(t, "an api and the reconciler stopped by SIGTERM", f)
}

// The relay dies between Kafka's ack and its Redis ack (its api process SIGKILLs itself there
// once 150 events passed), and the reconciler between its Postgres commit and its offset commit
// (after 300 events): the other api's relay claims the entries, a new reconciler re-reads the
// batch, and the record absorbs every duplicate.
func TestPipelineCrashPoints(t *testing.T) {
	s := newSale(t, saleOptions{})
	doomed := s.startAPI("FLASHSALE_CRASH_POINT=relay-after-publish:150")
	s.startAPI()
	rec := s.startReconciler("FLASHSALE_CRASH_POINT=consumer-after-commit:300")
	items := s.setupItems(4, 200)
	users := s.login("p", 600)
	s.run(workload{users: users, items: itemIDs(items), keyed: func(int) bool { return true }})
	s.waitFor("the relay's crash", 60*time.Second, doomed.Exited)
	s.waitFor("the reconciler's crash", 60*time.Second, rec.Exited)
	if !doomed.Logged("crashpoint: killing") || !rec.Logged("crashpoint: killing") {
		t.Fatal("a process ended without reaching its crash point")
	}
	start := time.Now()
	s.startReconciler()
	f := s.verify(items)
	f.recover = time.Since(start)
	report(t, "relay killed after Kafka ack; reconciler after commit", f)
}

// Kafka is down 30 s and Postgres is down 30 s (overlapping) while shoppers buy and the
// reconciler consumes: the outbox holds the events, the consumer retries, and the record
// catches up afterwards.
func TestKafkaAndPostgresDown(t *testing.T) {
	s := newSale(t, saleOptions{})
	s.startAPI()
	s.startReconciler()
	items := s.setupItems(4, 300)
	users := s.login("d", 1000)
	var end time.Time
	var wg sync.WaitGroup
	s.run(workload{users: users, items: itemIDs(items), keyed: func(i int) bool { return i%2 == 0 }, at: 200, workers: 16,
		when: func() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.broker.Stop()
				time.Sleep(10 * time.Second) // the fault's length is the scenario, not a wait for an outcome
				s.pgPx.Stop()
				time.Sleep(20 * time.Second)
				if err := s.broker.Restart(); err != nil {
					t.Errorf("broker restart: %v", err)
				}
				time.Sleep(10 * time.Second)
				if err := s.pgPx.Start(); err != nil {
					t.Errorf("postgres proxy restart: %v", err)
				}
				end = time.Now()
			}()
		}})
	wg.Wait()
	f := s.verify(items)
	f.recover = time.Since(end)
	report(t, "Kafka down 30 s; Postgres down 30 s", f)
}

// A poison message and an event Postgres refuses (NUL in a name) on the topic while the
// reconciler consumes a sale: both are parked in dead_letters and the record completes.
func TestPoisonEvents(t *testing.T) {
	s := newSale(t, saleOptions{})
	s.startAPI()
	s.startReconciler()
	items := s.setupItems(3, 200)
	users := s.login("x", 500)
	w := &kafka.Writer{Addr: kafka.TCP(s.broker.Addr()), Topic: topic, Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond}
	defer w.Close()
	s.run(workload{users: users, items: itemIDs(items), at: 100, when: func() {
		err := w.WriteMessages(context.Background(),
			kafka.Message{Key: []byte("it0"), Value: []byte("{not json")},
			kafka.Message{Key: []byte("it1"), Value: []byte(`{"event_id":"it1/1-0","type":"item.upserted","at":"2026-01-01T00:00:00Z","item_id":"it1","name":"a\u0000b","category":"c","price_cents":1,"stock_total":1,"per_user_limit":1}`)})
		if err != nil {
			t.Errorf("write poison: %v", err)
		}
	}})
	f := s.verify(items)
	var dead int
	if err := s.db.QueryRow(context.Background(), `SELECT count(*) FROM dead_letters`).Scan(&dead); err != nil || dead != 2 {
		rows, _ := s.db.Query(context.Background(), `SELECT error, convert_from(value, 'UTF8') FROM dead_letters`)
		for rows != nil && rows.Next() {
			var e, v string
			_ = rows.Scan(&e, &v)
			t.Logf("dead letter: %s: %.300s", e, v)
		}
		t.Fatalf("%d dead letters (%v), want 2", dead, err)
	}
	report(t, "a poison and a NUL-byte event on the topic", f)
}

// Redis loses everything (FLUSHDB) after a sale; `reconciler restore --all` rebuilds it from
// Postgres, and the sale goes on: new orders, no reused order ids, no oversell.
func TestFlushThenRestore(t *testing.T) {
	s := newSale(t, saleOptions{})
	s.startAPI()
	s.startReconciler()
	items := s.setupItems(3, 200)
	users := s.login("f", 400)
	s.run(workload{users: users[:300], items: itemIDs(items), keyed: func(i int) bool { return i%2 == 0 }})
	s.verify(items) // settled: Postgres holds the sale
	if err := s.rdb.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if out, err := s.runReconciler("restore", "--all"); err != nil {
		t.Fatalf("restore --all: %v\n%s", err, out)
	}
	s.run(workload{users: users[300:], items: itemIDs(items), keyed: func(i int) bool { return i%2 == 0 }})
	f := s.verify(items)
	f.recover = time.Since(start)
	report(t, "FLUSHDB, then reconciler restore --all, selling again", f)
}

// felt fails the test when the fault touched no call: no script call was re-sent and no
// purchase was refused 503 or lost its answer. A fault that missed the sale proves nothing.
func (s *sale) felt(fault string) {
	s.t.Helper()
	var resends float64
	for _, p := range s.apis {
		if !p.Exited() {
			resends += metric(s.t, p.URL, "flashsale_redis_script_resends_total")
		}
	}
	hit := 0
	for _, c := range s.shop.Calls() {
		if c.Status == 503 || c.Status == 0 {
			hit++
		}
	}
	if resends == 0 && hit == 0 {
		s.t.Fatalf("%s touched no call (no re-send, no 503): the scenario proved nothing", fault)
	}
	s.t.Logf("%s: %v script re-sends, %d purchases answered 503 or not at all", fault, resends, hit)
}
