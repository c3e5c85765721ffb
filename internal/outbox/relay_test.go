package outbox_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/kafkabroker"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/outbox"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

const topic = "flashsale.orders"

type env struct {
	t      *testing.T
	rdb    redis.UniversalClient
	keys   keyspace.Space
	inv    *inventory.Store
	broker *kafkabroker.Broker
	items  []string
	events int // events the scripts wrote so far (guarded by mu)
	mu     sync.Mutex
}

func newEnv(t *testing.T, items ...string) *env {
	rdb, keys := testenv.Redis(t)
	e := &env{t: t, rdb: rdb, keys: keys, broker: testenv.Kafka(t, topic, 3), items: items,
		inv: inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))}
	for _, id := range items {
		stock := int64(1_000_000)
		if _, _, err := e.inv.Upsert(context.Background(), inventory.Input{
			ID: id, Name: "Item " + id, Category: "c", PriceCents: 100, Stock: &stock, PerUserLimit: 1_000_000,
		}); err != nil {
			t.Fatal(err)
		}
		e.events++
	}
	return e
}

// sell makes n purchases spread over the items by workers goroutines (and a stock adjustment
// every 10th), counting the events they write.
func (e *env) sell(n, workers int) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := w; i < n; i += workers {
				item := e.items[i%len(e.items)]
				var err error
				if i%10 == 9 {
					_, err = e.inv.AdjustStock(ctx, item, 1)
				} else {
					_, err = e.inv.Purchase(ctx, inventory.PurchaseRequest{ItemID: item, UserID: fmt.Sprintf("u%d", i%50), Quantity: 1})
				}
				if err != nil {
					e.t.Errorf("sell: %v", err)
					return
				}
				e.mu.Lock()
				e.events++
				e.mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func (e *env) relay(opt outbox.Options) (*outbox.Relay, *kafka.Writer) {
	w := outbox.NewWriter([]string{e.broker.Addr()}, topic)
	e.t.Cleanup(func() { w.Close() })
	return outbox.New(e.rdb, e.keys, w, opt), w
}

// start runs r until the test ends (or stop is called); the returned channel gets Run's error.
func start(t *testing.T, r *outbox.Relay) (stop func(), done <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-ch; err != nil {
				t.Errorf("relay: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop, ch
}

// streams returns the outbox streams of the items (items may share a shard's).
func (e *env) streams() []string {
	var out []string
	seen := map[string]bool{}
	for _, id := range e.items {
		if k := e.keys.Item(id).Outbox(); !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// backlog is the number of entries left in the outbox streams.
func (e *env) backlog() int64 {
	var n int64
	for _, k := range e.streams() {
		n += e.rdb.XLen(context.Background(), k).Val()
	}
	return n
}

// streamEvents is the number of events the outbox streams hold (a purchase batch's entry
// holds one per order).
func (e *env) streamEvents() int {
	n := 0
	for _, k := range e.streams() {
		n += len(testenv.StreamEvents(e.t, e.rdb, k))
	}
	return n
}

// pending is the number of entries the relays' group holds unacknowledged (0 before a relay
// created the group).
func (e *env) pending() int64 {
	var n int64
	for _, k := range e.streams() {
		if p, err := e.rdb.XPending(context.Background(), k, "relay").Result(); err == nil {
			n += p.Count
		}
	}
	return n
}

// waitDrained waits until every outbox stream is empty (everything published and acked).
func (e *env) waitDrained() {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for e.backlog() > 0 {
		if time.Now().After(deadline) {
			e.t.Fatalf("outbox not drained: %d entries left", e.backlog())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readTopic returns every message on the topic, partition by partition, in offset order.
func readTopic(t *testing.T, addr string) map[int][]kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(addr)}
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	var reqs []kafka.OffsetRequest
	for _, p := range meta.Topics[0].Partitions {
		reqs = append(reqs, kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
	}
	offs, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][]kafka.Message{}
	for _, p := range offs.Topics[topic] {
		if p.LastOffset <= p.FirstOffset {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: topic, Partition: p.Partition, MaxWait: 100 * time.Millisecond})
		if err := r.SetOffset(p.FirstOffset); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("read partition %d: %v", p.Partition, err)
			}
			out[p.Partition] = append(out[p.Partition], m)
			if m.Offset >= p.LastOffset-1 {
				break
			}
		}
		r.Close()
	}
	return out
}

// checkTopic checks the topic against what the scripts wrote: every event is there (at
// least once, or exactly once when exact), valid, keyed by its item, and (when ordered) each
// item's first deliveries are in stream order. It returns how many duplicates it saw.
func (e *env) checkTopic(exact, ordered bool) int {
	e.t.Helper()
	seen := map[string]bool{}
	dups := 0
	last := map[string]events.Position{}
	parts := map[string]int{}
	for p, msgs := range readTopic(e.t, e.broker.Addr()) {
		for _, m := range msgs {
			ev, err := events.Parse(m.Value)
			if err != nil {
				e.t.Fatalf("partition %d offset %d: %v", p, m.Offset, err)
			}
			if string(m.Key) != ev.ItemID {
				e.t.Fatalf("event %s keyed %q, want its item %q", ev.EventID, m.Key, ev.ItemID)
			}
			if q, ok := parts[ev.ItemID]; ok && q != p {
				e.t.Fatalf("item %s on partitions %d and %d", ev.ItemID, q, p)
			}
			parts[ev.ItemID] = p
			if seen[ev.EventID] {
				dups++
				continue
			}
			seen[ev.EventID] = true
			pos, _ := ev.Position()
			if ordered && pos.Less(last[ev.ItemID]) {
				e.t.Fatalf("item %s: event %s after a later one", ev.ItemID, ev.EventID)
			}
			last[ev.ItemID] = pos
		}
	}
	if len(seen) != e.events {
		e.t.Fatalf("topic has %d distinct events, the scripts wrote %d", len(seen), e.events)
	}
	if exact && dups > 0 {
		e.t.Fatalf("%d duplicates without any failure", dups)
	}
	return dups
}

// TestRelayPublishesEveryEventOnceInOrder: concurrent sales; every event reaches Kafka once,
// keyed by item, in stream order per item, and the streams are trimmed.
func TestRelayPublishesEveryEventOnceInOrder(t *testing.T) {
	e := newEnv(t, "a", "b", "c", "d")
	r, _ := e.relay(outbox.Options{})
	start(t, r)
	e.sell(3000, 32)
	e.waitDrained()
	e.checkTopic(true, true)
	if got := r.Stats().Published; got != int64(e.events) {
		t.Fatalf("relay reports %d published, want %d", got, e.events)
	}
}

// TestSeveralRelays: three relay instances share the streams through the consumer group;
// every event is published exactly once. (Across instances an item's events may interleave;
// the consumer applies them in any order.)
func TestSeveralRelays(t *testing.T) {
	e := newEnv(t, "a", "b", "c", "d")
	var total int64
	var relays []*outbox.Relay
	for i := range 3 {
		r, _ := e.relay(outbox.Options{Consumer: fmt.Sprintf("r%d", i)})
		start(t, r)
		relays = append(relays, r)
	}
	e.sell(3000, 32)
	e.waitDrained()
	e.checkTopic(true, false)
	for _, r := range relays {
		total += r.Stats().Published
	}
	if total != int64(e.events) {
		t.Fatalf("relays report %d published, want %d", total, e.events)
	}
}

// TestRelayKafkaOutage: with the broker down, sales go on, entries wait in Redis and the
// backlog is reported; when it is back, the backlog drains in order.
func TestRelayKafkaOutage(t *testing.T) {
	e := newEnv(t, "a", "b", "c")
	r, _ := e.relay(outbox.Options{})
	stop, _ := start(t, r)
	e.sell(300, 8)
	e.waitDrained()

	e.broker.Stop()
	e.sell(1000, 8) // the api keeps selling
	deadline := time.Now().Add(30 * time.Second)
	for r.Stats().Failures == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the relay never noticed the outage")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := e.backlog(); n == 0 {
		t.Fatal("entries left Redis while Kafka was down")
	}
	for total, _ := r.Backlog(); total == 0; total, _ = r.Backlog() {
		if time.Now().After(deadline) {
			t.Fatal("the relay never reported the backlog")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := e.broker.Restart(); err != nil {
		t.Fatal(err)
	}
	e.sell(300, 8)
	e.waitDrained()
	stop()
	e.checkTopic(false, true)
}

// TestRelayCrashBetweenPublishAndAck: a relay dies after Kafka acknowledged a batch but before
// it acknowledged the entries in Redis; another relay claims them and publishes them again.
// Nothing is lost; the duplicates carry the same event_id for the consumer to absorb.
func TestRelayCrashBetweenPublishAndAck(t *testing.T) {
	e := newEnv(t, "a", "b")
	e.sell(500, 8)
	crash := errors.New("simulated crash")
	var doomedEvents atomic.Int64 // what Kafka took from the doomed relay (entries hold one or more)
	doomed, _ := e.relay(outbox.Options{Consumer: "doomed", AfterPublish: func(n int) error {
		doomedEvents.Add(int64(n))
		return crash
	}})
	if err := doomed.Run(context.Background()); !errors.Is(err, crash) {
		t.Fatalf("Run returned %v, want the hook's error", err)
	}
	pending := e.pending()
	if pending == 0 {
		t.Fatal("the crashed relay left nothing pending")
	}
	heir, _ := e.relay(outbox.Options{Consumer: "heir", ClaimIdle: 200 * time.Millisecond, ClaimInterval: 50 * time.Millisecond})
	stop, _ := start(t, heir)
	e.sell(200, 4)
	e.waitDrained()
	stop()
	if heir.Stats().Claimed != pending {
		t.Fatalf("heir claimed %d entries, %d were pending", heir.Stats().Claimed, pending)
	}
	if dups := e.checkTopic(false, false); int64(dups) != doomedEvents.Load() {
		t.Fatalf("%d duplicates on the topic, want the %d events of the %d re-published entries", dups, doomedEvents.Load(), pending)
	}
}

// TestKcatReadsEvents: a Kafka client nobody here wrote (kcat, librdkafka) reads the events.
func TestKcatReadsEvents(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal("kcat is not installed: apt-get install -y kcat (scripts/test.sh installs it)")
	}
	e := newEnv(t, "a", "b")
	r, _ := e.relay(outbox.Options{})
	stop, _ := start(t, r)
	e.sell(100, 4)
	e.waitDrained()
	stop()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, "-C", "-b", e.broker.Addr(), "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k\t%s\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, stderr.String())
	}
	ids := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), "\t")
		if !ok {
			t.Fatalf("kcat line %q", sc.Text())
		}
		ev, err := events.Parse([]byte(value))
		if err != nil || ev.ItemID != key {
			t.Fatalf("kcat read %q: %v", sc.Text(), err)
		}
		ids[ev.EventID] = true
	}
	if len(ids) != e.events {
		t.Fatalf("kcat read %d events, want %d", len(ids), e.events)
	}
}

// TestOutboxBound: while Kafka is down the outbox grows; past Options.Max the relay refuses
// purchases (a store wired with its Admit answers outbox.ErrFull and writes nothing) and
// Ready says why; once Kafka is back and the backlog drains, purchases are admitted again.
func TestOutboxBound(t *testing.T) {
	e := newEnv(t, "a", "b")
	const bound = 50
	r, _ := e.relay(outbox.Options{Max: bound})
	guarded := inventory.NewStore(e.rdb, e.keys, options.Inventory(inventory.Options{Admit: r.Admit}))
	stop, _ := start(t, r)
	e.waitDrained()
	// A purchase with a key before the bound, replayed over it: its order back.
	keyed := inventory.PurchaseRequest{ItemID: "a", UserID: "keyed", Quantity: 1, IdempotencyKey: "k1"}
	made, err := guarded.Purchase(context.Background(), keyed)
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.events++
	e.mu.Unlock()
	e.waitDrained()

	e.broker.Stop()
	e.sell(4*bound+20, 4) // through the unguarded store: the outbox passes its bound (4 workers: batches of up to 4 share an entry)
	deadline := time.Now().Add(30 * time.Second)
	for r.Admit() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("outbox at %d entries, bound %d: purchases still admitted", e.backlog(), bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := r.Ready(); err == nil || !strings.Contains(err.Error(), "FLASHSALE_OUTBOX_MAX") {
		t.Fatalf("Ready = %v, want the bound named", err)
	}
	before := e.backlog()
	_, err = guarded.Purchase(context.Background(), inventory.PurchaseRequest{ItemID: "a", UserID: "late", Quantity: 1})
	if !errors.Is(err, outbox.ErrFull) || !errors.Is(err, inventory.ErrNotAdmitted) {
		t.Fatalf("purchase over the bound: %v, want outbox.ErrFull as inventory.ErrNotAdmitted", err)
	}
	// A replay of a known key is answered from its record whatever the outbox holds; a new
	// key of the same shopper is a new purchase, refused.
	replay, err := guarded.Purchase(context.Background(), keyed)
	if err != nil || !replay.Replayed || replay.Order.ID != made.Order.ID {
		t.Fatalf("replay over the bound: %+v %v, want order %s replayed", replay, err, made.Order.ID)
	}
	keyed.IdempotencyKey = "k2"
	if _, err := guarded.Purchase(context.Background(), keyed); !errors.Is(err, outbox.ErrFull) {
		t.Fatalf("a new key over the bound: %v, want outbox.ErrFull", err)
	}
	if after := e.backlog(); after != before {
		t.Fatalf("a refused purchase wrote: outbox %d -> %d", before, after)
	}

	if err := e.broker.Restart(); err != nil {
		t.Fatal(err)
	}
	e.waitDrained()
	for r.Admit() != nil {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatal("purchases still refused after the outbox drained")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := guarded.Purchase(context.Background(), inventory.PurchaseRequest{ItemID: "a", UserID: "late", Quantity: 1}); err != nil {
		t.Fatalf("purchase after the drain: %v", err)
	}
	e.mu.Lock()
	e.events++
	e.mu.Unlock()
	e.waitDrained()
	stop()
	e.checkTopic(false, true)
}

// recordingPublisher forwards to a Kafka writer and records the size of every write.
type recordingPublisher struct {
	w      *kafka.Writer
	mu     sync.Mutex
	writes [][3]int // entries (distinct stream positions), messages, bytes
}

func (p *recordingPublisher) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	size := 0
	entries := map[events.Position]bool{} // positions of one write are of one stream
	for _, m := range msgs {
		size += len(m.Key) + len(m.Value)
		if ev, err := events.Parse(m.Value); err == nil {
			pos, _ := ev.Position()
			entries[pos] = true
		}
	}
	p.mu.Lock()
	p.writes = append(p.writes, [3]int{len(entries), len(msgs), size})
	p.mu.Unlock()
	return p.w.WriteMessages(ctx, msgs...)
}

// TestRelayBatchesAreBounded: a backlog far larger than one batch (as after a long Kafka
// outage) drains in writes bounded in entries and in bytes, every event once and in order.
func TestRelayBatchesAreBounded(t *testing.T) {
	e := newEnv(t, "a", "b", "c", "d", "e", "f")
	e.sell(4000, 16) // written before any relay runs: the backlog of an outage
	const maxEntries, maxBytes = 100, 8 << 10
	w := outbox.NewWriter([]string{e.broker.Addr()}, topic)
	t.Cleanup(func() { w.Close() })
	pub := &recordingPublisher{w: w}
	r := outbox.New(e.rdb, e.keys, pub, outbox.Options{ReadCount: maxEntries, MaxBatchBytes: maxBytes})
	start(t, r)
	e.waitDrained()
	e.checkTopic(true, true)
	pub.mu.Lock()
	defer pub.mu.Unlock()
	var entries, msgs int
	for _, wr := range pub.writes {
		entries += wr[0]
		msgs += wr[1]
		if wr[0] > maxEntries || (wr[2] > maxBytes && wr[0] > 1) {
			t.Fatalf("a write of %d entries (%d events), %d bytes: over the bounds %d entries, %d bytes", wr[0], wr[1], wr[2], maxEntries, maxBytes)
		}
	}
	// The bytes bound, not only the entries bound, cut some writes.
	if len(pub.writes) <= entries/maxEntries+1 {
		t.Fatalf("%d writes for %d entries: the bytes bound never cut a read", len(pub.writes), entries)
	}
	if msgs != e.events {
		t.Fatalf("published %d events in %d writes, want %d", msgs, len(pub.writes), e.events)
	}
}

// holdingPublisher is a Kafka producer whose writes hang until released (a broker that stalls
// for this relay, a paused process), forwarding to w once released. held counts the messages
// its hanging writes carry.
type holdingPublisher struct {
	w       *kafka.Writer
	release chan struct{}
	mu      sync.Mutex
	held    int
}

func (p *holdingPublisher) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	p.mu.Lock()
	p.held += len(msgs)
	p.mu.Unlock()
	select {
	case <-p.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.w.WriteMessages(ctx, msgs...)
}

func (p *holdingPublisher) holding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// TestStalledRelayHoldsOnlyItsOwnEntries: one relay's Kafka write hangs on the oldest entries
// while another publishes the rest. The streams must hold only unacknowledged entries, so
// memory, backlog and the outbox bound follow what is unpublished; released, the stalled relay
// publishes its entries once.
func TestStalledRelayHoldsOnlyItsOwnEntries(t *testing.T) {
	e := newEnv(t, "a", "b", "c")
	e.sell(30, 4)
	w := outbox.NewWriter([]string{e.broker.Addr()}, topic)
	t.Cleanup(func() { w.Close() })
	pub := &holdingPublisher{w: w, release: make(chan struct{})}
	stalled := outbox.New(e.rdb, e.keys, pub, outbox.Options{Consumer: "stalled", PublishTimeout: 5 * time.Minute})
	start(t, stalled)
	var once sync.Once
	release := func() { once.Do(func() { close(pub.release) }) }
	t.Cleanup(release) // before the relay's stop (cleanups run last in, first out)
	deadline := time.Now().Add(30 * time.Second)
	for pub.holding() < e.events {
		if time.Now().After(deadline) {
			t.Fatalf("the stalled relay holds %d of the first %d entries", pub.holding(), e.events)
		}
		time.Sleep(10 * time.Millisecond)
	}
	held := pub.holding()

	const bound = 200
	// The stalled relay's entries stay its own however long this takes on a busy machine: past
	// the default ClaimIdle (30 s) the live relay would take them over and the counts below
	// would be another test's.
	live, _ := e.relay(outbox.Options{Consumer: "live", Max: bound, ClaimIdle: time.Hour})
	start(t, live)
	e.sell(3000, 16)
	for live.Stats().Published < int64(e.events-held) {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("the live relay published %d of %d", live.Stats().Published, e.events-held)
		}
		time.Sleep(10 * time.Millisecond)
	}
	heldEntries := e.pending() // the stalled relay's: the live one acknowledged all it read
	if n := e.backlog(); n != heldEntries {
		t.Errorf("streams hold %d entries with %d unacknowledged (%d events, all others published)", n, heldEntries, e.events)
	}
	if n := e.streamEvents(); n != held {
		t.Errorf("streams hold %d events, want the stalled relay's %d", n, held)
	}
	total, err := live.MeasureBacklog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if total != heldEntries {
		t.Errorf("measured backlog %d, want the %d unpublished entries", total, heldEntries)
	}
	if err := live.Admit(); err != nil {
		t.Errorf("bound %d, %d entries unpublished: %v", bound, held, err)
	}

	release()
	e.waitDrained()
	e.checkTopic(true, false)
	if got := stalled.Stats().Published; got != int64(held) {
		t.Fatalf("the stalled relay published %d once released, want its %d", got, held)
	}
}

// cutOffPublisher is a Kafka producer that cannot reach the broker while down is set (this api
// instance is cut off from Kafka while the others are not), and forwards to w otherwise.
type cutOffPublisher struct {
	w     *kafka.Writer
	down  atomic.Bool
	fails atomic.Int64
}

func (p *cutOffPublisher) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	if p.down.Load() {
		p.fails.Add(1)
		return errors.New("dial tcp: connection refused")
	}
	return p.w.WriteMessages(ctx, msgs...)
}

// TestRelayCutOffFromKafkaLosesItsEntries: a relay that reads entries and then cannot publish
// them retries on its own; the entries it holds must still be taken over by a relay that can
// publish, once they were idle for ClaimIdle (a retry must not make them look fresh). Back in
// touch with Kafka, the relay does not publish again what it lost, and relays new entries.
func TestRelayCutOffFromKafkaLosesItsEntries(t *testing.T) {
	e := newEnv(t, "a", "b")
	e.sell(30, 4)
	w := outbox.NewWriter([]string{e.broker.Addr()}, topic)
	t.Cleanup(func() { w.Close() })
	pub := &cutOffPublisher{w: w}
	pub.down.Store(true)
	cut := outbox.New(e.rdb, e.keys, pub, outbox.Options{Consumer: "cut"})
	start(t, cut)
	deadline := time.Now().Add(30 * time.Second)
	for e.pending() < e.backlog() || pub.fails.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the cut-off relay holds %d of %d entries", e.pending(), e.backlog())
		}
		time.Sleep(10 * time.Millisecond)
	}
	held := e.pending() // entries

	// ClaimIdle above the cut-off relay's longest wait between retries (retryWait: 3 s).
	live, _ := e.relay(outbox.Options{Consumer: "live", ClaimIdle: 4 * time.Second, ClaimInterval: 100 * time.Millisecond})
	stopLive, _ := start(t, live)
	e.sell(100, 4)
	e.waitDrained()
	stopLive()
	if got := live.Stats().Claimed; got != held {
		t.Fatalf("the live relay claimed %d entries, the cut-off one held %d", got, held)
	}

	pub.down.Store(false)
	before := e.events
	e.sell(50, 4)
	e.waitDrained()
	if got := cut.Stats().Published; got != int64(e.events-before) {
		t.Fatalf("back in touch with Kafka, the relay published %d, want the %d new events", got, e.events-before)
	}
	e.checkTopic(true, false)
}

// A shutdown out of time: the relay was told to stop while a Kafka write hangs, and Abort cuts
// that write instead of waiting out PublishTimeout. Nothing is lost: the entries stay pending
// in Redis, and another relay publishes them once they are idle for ClaimIdle.
func TestAbortCutsAHangingPublish(t *testing.T) {
	e := newEnv(t, "a")
	e.sell(5, 1)
	w := outbox.NewWriter([]string{e.broker.Addr()}, topic)
	t.Cleanup(func() { w.Close() })
	pub := &holdingPublisher{w: w, release: make(chan struct{})} // never released
	r := outbox.New(e.rdb, e.keys, pub, outbox.Options{Consumer: "stopping", PublishTimeout: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for pub.holding() < e.events {
		if time.Now().After(deadline) {
			t.Fatalf("the relay holds %d of %d entries", pub.holding(), e.events)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()  // the shutdown: the batch in hand may finish...
	r.Abort() // ...until the shutdown's time is up
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run still waits for its hanging publish after Abort")
	}
	if n := e.pending(); n != int64(e.events) {
		t.Fatalf("%d entries pending after the abort, want all %d kept in Redis", n, e.events)
	}
	next, _ := e.relay(outbox.Options{Consumer: "next", ClaimIdle: time.Millisecond, ClaimInterval: 10 * time.Millisecond})
	start(t, next)
	e.waitDrained()
	e.checkTopic(true, true)
}

// TestBatchEntryRepublishedWithStableIDs: one purchase.lua call of five attempts is one outbox
// entry, published as five complete order.reserved events keyed by the item. A relay that
// crashes between Kafka's ack and its own is followed by one that re-publishes the same five
// event ids, which the consumer's de-duplication absorbs.
func TestBatchEntryRepublishedWithStableIDs(t *testing.T) {
	e := newEnv(t, "a")
	ctx := context.Background()
	k := e.keys.Item("a")
	keys := []string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(), k.PurchaseLimits(), k.QueueTickets(), k.UserOrders()}
	args := []any{600000, 86400000, 0, 0, 0, "a"}
	for i := 1; i <= 5; i++ {
		u := fmt.Sprint("u", i)
		keys = append(keys, k.Hash())
		args = append(args, u, i, "", "")
	}
	bare := exactlyonce.Bare("lib/gcra.lua", "lib/changed.lua", "inventory/purchase.lua")
	res, err := bare.Run(ctx, e.rdb, keys, args...).Slice()
	if err != nil || len(res) != 4*5+1 {
		t.Fatal(res, err)
	}
	for i := range 5 { // four values per attempt, then the batch's own string
		if res[4*i] != "C" {
			t.Fatalf("attempt %d: %v", i+1, res[4*i:4*i+4])
		}
	}
	e.events += 5
	entries, err := e.rdb.XRange(ctx, k.Outbox(), "-", "+").Result()
	if err != nil || len(entries) != 2 { // item.upserted, then the batch
		t.Fatalf("outbox entries %v %v, want the item's and one for the batch", entries, err)
	}
	batchID := entries[1].ID

	crash := errors.New("simulated crash")
	var doomedEvents atomic.Int64
	doomed, _ := e.relay(outbox.Options{Consumer: "doomed", AfterPublish: func(n int) error {
		doomedEvents.Add(int64(n))
		return crash
	}})
	if err := doomed.Run(ctx); !errors.Is(err, crash) {
		t.Fatalf("Run returned %v, want the hook's error", err)
	}
	if doomedEvents.Load() != 6 || e.pending() != 2 {
		t.Fatalf("the doomed relay published %d events and left %d entries pending, want 6 and 2", doomedEvents.Load(), e.pending())
	}
	heir, _ := e.relay(outbox.Options{Consumer: "heir", ClaimIdle: 200 * time.Millisecond, ClaimInterval: 50 * time.Millisecond})
	stop, _ := start(t, heir)
	e.waitDrained()
	stop()
	if got := heir.Stats().Published; got != 6 {
		t.Fatalf("the heir published %d events, want 6", got)
	}
	if dups := e.checkTopic(false, false); dups != 6 {
		t.Fatalf("%d duplicates, want the 6 events published twice", dups)
	}
	seen := map[string]int{}
	for _, msgs := range readTopic(t, e.broker.Addr()) {
		for _, m := range msgs {
			ev, err := events.Parse(m.Value)
			if err != nil {
				t.Fatal(err)
			}
			seen[ev.EventID]++
			if ev.Type != events.OrderReserved {
				continue
			}
			seq, _ := strconv.Atoi(strings.TrimPrefix(ev.OrderID, "a."))
			want := fmt.Sprintf("order a.%d of u%d, %d units at 100, expiring 600000 ms after it was made, id %s",
				seq, seq, seq, events.OrderEventID(ev.OrderID, batchID))
			got := fmt.Sprintf("order %s of %s, %d units at %d, expiring %d ms after it was made, id %s",
				ev.OrderID, ev.UserID, *ev.Quantity, *ev.PriceCents, ev.ExpiresAt.Sub(ev.At).Milliseconds(), ev.EventID)
			if got != want || string(m.Key) != "a" {
				t.Errorf("event keyed %q: %s\nwant %s", m.Key, got, want)
			}
		}
	}
	for i := 1; i <= 5; i++ {
		if id := events.OrderEventID(fmt.Sprint("a.", i), batchID); seen[id] != 2 {
			t.Errorf("event %s on the topic %d times, want 2 (published, then re-published)", id, seen[id])
		}
	}
}
