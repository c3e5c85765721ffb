package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/events"
)

// The relay rows: purchase → Kafka latency with a small and a large catalogue, two apis taking
// alternating turns of paced purchases (an open loop). Each purchase is timed from its 201 answer
// read by the bench to its order.reserved event read back from the broker by a plain consumer of
// every partition (no group, from the log end), its fetch parked on the broker (MinBytes 1).

// relayRowName is the rows' common name; each adds the catalogue in brackets.
const relayRowName = "purchase → Kafka latency"

// relayRate is the purchases' pace and each catalogue's measured time in all.
func (o options) relayRate() (perSecond int, dur time.Duration) {
	if o.short {
		return 50, time.Second
	}
	return 150, 8 * time.Second
}

// relayCatalogue is one side of the relay rows: an api and the items it sells.
type relayCatalogue struct {
	run    *scaleRun
	addr   string
	onSale []string
	sent   int
}

// relayRows measures the relay rows: s is the largest catalogue, already loaded and idle on
// api; a second api with the smallest catalogue is started for them and stopped after.
func (s *scaleRun) relayRows(ctx context.Context, api *child) error {
	small := &scaleRun{b: s.b, rdb: s.rdb, redisAddr: s.redisAddr, redisPid: s.redisPid, kafka: s.kafka,
		items: s.b.opt.scaleSizes()[0], prefix: "relay:", ids: "r"}
	defer small.stop()
	sapi, err := small.startAPI(ctx)
	if err != nil {
		return err
	}
	if err := small.importItems(ctx, sapi.addr); err != nil {
		return err
	}
	if err := small.waitPublished(ctx, int64(small.items)); err != nil {
		return err
	}
	rate, dur := s.b.opt.relayRate()
	rounds := max(1, s.b.opt.rounds)
	if s.b.opt.short {
		rounds = 1
	}
	perTurn := rate * int(dur.Seconds()) / rounds
	cats := []*relayCatalogue{{run: small, addr: sapi.addr}, {run: s, addr: api.addr}}
	for _, c := range cats {
		selling := min(relaySelling, c.run.items)
		for i := range selling {
			c.onSale = append(c.onSale, c.run.itemID(i*(c.run.items/selling)))
		}
		// Enough stock for every purchase (the import gave each item 100).
		for _, id := range c.onSale {
			if err := c.run.restock(ctx, c.addr, id, int64(perTurn*rounds/selling+1)); err != nil {
				return err
			}
		}
	}
	progress(s.b.out, "scale: purchase -> Kafka, %d and %d items in turns", small.items, s.items)
	tail, err := startTail(ctx, s.kafka, "flashsale.orders")
	if err != nil {
		return err
	}
	defer tail.close()
	answered := map[*relayCatalogue]map[string]time.Time{}
	for r := range rounds {
		for j := range cats {
			c := cats[(j+r)%len(cats)]
			got, err := c.purchases(ctx, rate, perTurn, fmt.Sprintf("relay%d-%d-", c.run.items, r))
			if err != nil {
				return err
			}
			if answered[c] == nil {
				answered[c] = map[string]time.Time{}
			}
			maps.Copy(answered[c], got)
			c.sent += perTurn
		}
	}
	// Every answered order's event, or 30 s.
	deadline := time.Now().Add(30 * time.Second)
	for missing := 1; missing > 0 && time.Now().Before(deadline); {
		missing = 0
		for _, c := range cats {
			missing += tail.missing(answered[c])
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	var first *row
	for _, c := range cats {
		lat, early, missing := tail.latencies(answered[c])
		r := row{name: fmt.Sprintf("%s (%s items, %d selling)", relayRowName, thousands(float64(c.run.items)), len(c.onSale)), noRate: true}
		if len(lat) > 0 {
			r.res = &result{n: int64(len(lat)), p50: lat[len(lat)/2], p99: lat[min(len(lat)-1, len(lat)*99/100)]}
		}
		r.note = fmt.Sprintf("%d purchases at %d/s over %d items, in %d turns alternating with the other catalogue's; %d events arrived before the bench had read the answer (counted 0)",
			c.sent, rate, len(c.onSale), rounds, early)
		if missing > 0 {
			r.note += fmt.Sprintf("; %d events did not arrive within 30 s", missing)
		}
		if first != nil && first.res != nil && r.res != nil {
			r.targetText = fmt.Sprintf("p99 ≤ %s (%s items) %s", ms(first.res.p99), thousands(float64(small.items)), mark(r.res.p99 <= first.res.p99))
			r.ratioText = fmt.Sprintf("**%.2f×** p99", float64(r.res.p99)/float64(first.res.p99))
		}
		s.b.rows = append(s.b.rows, r)
		if first == nil {
			first = &r
		}
	}
	return nil
}

// purchases sends n purchases at rate per second over the catalogue's items on sale, each by
// a shopper of its own, and returns when each was answered (order id -> time).
func (c *relayCatalogue) purchases(ctx context.Context, rate, n int, users string) (map[string]time.Time, error) {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	var (
		mu       sync.Mutex
		answered = map[string]time.Time{}
		failed   []string
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, 64)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := range n {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+c.addr+"/api/items/"+c.onSale[i%len(c.onSale)]+"/purchase",
				strings.NewReader(`{"quantity":1}`))
			req.Header.Set("Authorization", "Bearer "+token(c.run.b.secret, users+strconv.Itoa(i)))
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				mu.Lock()
				failed = append(failed, err.Error())
				mu.Unlock()
				return
			}
			body, _ := io.ReadAll(resp.Body)
			at := time.Now()
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if id := orderID(body); resp.StatusCode == 201 && id != "" {
				answered[id] = at
			} else {
				failed = append(failed, fmt.Sprintf("%d %s", resp.StatusCode, body))
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		return nil, fmt.Errorf("bench: %d of %d relay-row purchases failed, e.g. %s", len(failed), n, failed[0])
	}
	return answered, nil
}

// restock adds delta units of an item through the admin route.
func (s *scaleRun) restock(ctx context.Context, addr, id string, delta int64) error {
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/api/admin/items/"+id+"/stock",
		strings.NewReader(fmt.Sprintf(`{"delta":%d}`, delta)))
	req.Header.Set("Authorization", "Bearer "+s.b.admin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("bench: restock %s: %d %s", id, resp.StatusCode, body)
	}
	return nil
}

// kafkaTail reads every partition of a topic from its end at start, recording when each
// order.reserved event arrived.
type kafkaTail struct {
	readers []*kafka.Reader
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu      sync.Mutex
	arrived map[string]time.Time // order id -> when the consumer read its event
}

func startTail(ctx context.Context, broker, topic string) (*kafkaTail, error) {
	c := &kafka.Client{Addr: kafka.TCP(broker), Timeout: 10 * time.Second}
	meta, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("bench: kafka metadata: %w", err)
	}
	if len(meta.Topics) != 1 || meta.Topics[0].Error != nil {
		return nil, fmt.Errorf("bench: kafka metadata of %s: %+v", topic, meta.Topics)
	}
	var reqs []kafka.OffsetRequest
	for _, p := range meta.Topics[0].Partitions {
		reqs = append(reqs, kafka.LastOffsetOf(p.ID))
	}
	lo, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("bench: kafka offsets: %w", err)
	}
	tctx, cancel := context.WithCancel(ctx)
	t := &kafkaTail{cancel: cancel, arrived: map[string]time.Time{}}
	for _, p := range lo.Topics[topic] {
		if p.Error != nil {
			cancel()
			return nil, fmt.Errorf("bench: kafka offsets of partition %d: %w", p.Partition, p.Error)
		}
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers: []string{broker}, Topic: topic, Partition: p.Partition,
			MinBytes: 1, MaxBytes: 8 << 20, MaxWait: time.Second,
		})
		if err := r.SetOffset(p.LastOffset); err != nil {
			cancel()
			t.close()
			return nil, err
		}
		t.readers = append(t.readers, r)
		t.wg.Add(1)
		go t.read(tctx, r)
	}
	return t, nil
}

func (t *kafkaTail) read(ctx context.Context, r *kafka.Reader) {
	defer t.wg.Done()
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			if !errors.Is(err, context.Canceled) && ctx.Err() == nil {
				progress(nil, "kafka tail: %v", err)
			}
			return
		}
		at := time.Now()
		var ev events.Event
		if json.Unmarshal(m.Value, &ev) != nil || ev.Type != events.OrderReserved {
			continue
		}
		t.mu.Lock()
		if _, seen := t.arrived[ev.OrderID]; !seen {
			t.arrived[ev.OrderID] = at
		}
		t.mu.Unlock()
	}
}

func (t *kafkaTail) close() {
	t.cancel()
	for _, r := range t.readers {
		r.Close()
	}
	t.wg.Wait()
}

// missing counts the answered orders whose event has not arrived yet.
func (t *kafkaTail) missing(answered map[string]time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for id := range answered {
		if _, ok := t.arrived[id]; !ok {
			n++
		}
	}
	return n
}

// latencies returns answer → arrival of every arrived event, sorted; an event read before
// the bench had read its answer counts 0 (early).
func (t *kafkaTail) latencies(answered map[string]time.Time) (lat []time.Duration, early, missing int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, at := range answered {
		got, ok := t.arrived[id]
		switch {
		case !ok:
			missing++
		case got.Before(at):
			early++
			lat = append(lat, 0)
		default:
			lat = append(lat, got.Sub(at))
		}
	}
	slices.Sort(lat)
	return lat, early, missing
}
