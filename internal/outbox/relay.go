// Package outbox owns the relay from the Redis outbox streams to Kafka. Every Lua script that
// changes state appends its event to the item's outbox stream in the same atomic call; the
// relay publishes those entries and removes them only after Kafka acknowledged them (acks=all),
// so an event is never lost between Redis and Kafka: it is published at least once, and the
// consumer de-duplicates on event_id.
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/metrics"
)

// Publisher is what the relay needs from a Kafka producer; *kafka.Writer is one. WriteMessages
// must return only after every message was acknowledged, or an error.
type Publisher interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// NewWriter returns a kafka-go producer configured for the relay: acks from all in-sync
// replicas, messages keyed by item id and hashed to a partition (so one item's events keep
// their order), small linger so a batch leaves as soon as the relay has read it.
func NewWriter(brokers []string, topic string) *kafka.Writer {
	return &kafka.Writer{
		Addr:            kafka.TCP(brokers...),
		Topic:           topic,
		Balancer:        &kafka.Hash{},
		RequiredAcks:    kafka.RequireAll,
		BatchSize:       1000,
		BatchBytes:      8 << 20,
		BatchTimeout:    2 * time.Millisecond,
		MaxAttempts:     3,
		WriteBackoffMin: 50 * time.Millisecond,
		WriteBackoffMax: 500 * time.Millisecond,
		WriteTimeout:    5 * time.Second,
		ReadTimeout:     5 * time.Second,
	}
}

// Options tune a Relay; zero values take the defaults.
type Options struct {
	// Group is the Redis consumer group every relay instance joins (default "relay").
	Group string
	// Consumer names this instance in the group (default host-pid-random).
	Consumer string
	// PollInterval is the pause after a poll that found nothing (default 50ms).
	PollInterval time.Duration
	// ReadCount is the most entries read per stream per poll (default 500).
	ReadCount int64
	// ClaimIdle: entries another consumer read but has not acknowledged for this long are
	// taken over (its process crashed or hangs). Default 30s.
	ClaimIdle time.Duration
	// ClaimInterval is how often the relay looks for such entries (default 1s).
	ClaimInterval time.Duration
	// PublishTimeout bounds one Kafka publish (default 10s).
	PublishTimeout time.Duration
	// Items lists the item ids whose streams to relay (default: SMEMBERS of the catalogue).
	Items func(ctx context.Context) ([]string, error)
	// ItemsInterval is how often Items is called to find new items (default 1s).
	ItemsInterval time.Duration
	// Max bounds the outbox: while every stream together holds more entries than this (Kafka
	// unreachable for long), Admit refuses new purchases instead of letting Redis run out of
	// memory. 0 = no bound.
	Max int64
	// AfterPublish, when set, runs after Kafka acknowledged a batch and before the entries are
	// acknowledged in Redis; a non-nil error stops Run with it, leaving the entries pending
	// as a crashed process would (tests use it to prove nothing is lost).
	AfterPublish func(published int) error
}

// Stats are the relay's counters since it started.
type Stats struct {
	Published int64 // events published and acknowledged
	Failures  int64 // failed publish attempts
	Claimed   int64 // entries taken over from other consumers
}

// Relay moves outbox entries to Kafka. Any number of relays (one per api instance) may run
// at once: the consumer group gives each entry to one of them, and entries of a relay that
// died are claimed by another after ClaimIdle.
type Relay struct {
	rdb  redis.UniversalClient
	keys keyspace.Space
	pub  Publisher
	opt  Options

	streams   []stream
	known     map[string]bool // streams whose group exists
	lastItems time.Time
	lastClaim time.Time

	published, failures, claimed atomic.Int64

	backlogMu sync.Mutex
	backlog   map[string]int64 // by item ("rank" for the ratings stream)
	total     atomic.Int64     // entries in every stream at the last measure
}

// ErrFull refuses a purchase while the outbox is over its bound (Options.Max).
var ErrFull = errors.New("the event outbox is over its bound (Kafka unreachable?); nothing was changed, try again later")

// Admit refuses new purchases (ErrFull) while the outbox is over Options.Max. Every relay reads
// every stream, so every api instance sees the same total within a measure interval.
func (r *Relay) Admit() error {
	if r.opt.Max > 0 && r.total.Load() > r.opt.Max {
		return ErrFull
	}
	return nil
}

// Ready reports the outbox bound as a readiness failure that says why.
func (r *Relay) Ready() error {
	if err := r.Admit(); err != nil {
		return fmt.Errorf("outbox holds %d entries, over FLASHSALE_OUTBOX_MAX %d: purchases are refused until Kafka takes them", r.total.Load(), r.opt.Max)
	}
	return nil
}

// stream is one outbox stream and how to read it next.
type stream struct {
	key  string
	item string // "" for the ranking stream
	// retry: a publish of entries read from this stream failed; re-read this consumer's own
	// pending entries (ID "0") before new ones, so the backlog drains in order.
	retry       bool
	claimCursor string
}

// New returns a relay publishing the outbox streams of keys through pub.
func New(rdb redis.UniversalClient, keys keyspace.Space, pub Publisher, opt Options) *Relay {
	if opt.Group == "" {
		opt.Group = "relay"
	}
	if opt.Consumer == "" {
		host, _ := os.Hostname()
		opt.Consumer = fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.IntN(1<<16))
	}
	if opt.PollInterval <= 0 {
		opt.PollInterval = 50 * time.Millisecond
	}
	if opt.ReadCount <= 0 {
		opt.ReadCount = 500
	}
	if opt.ClaimIdle <= 0 {
		opt.ClaimIdle = 30 * time.Second
	}
	if opt.ClaimInterval <= 0 {
		opt.ClaimInterval = time.Second
	}
	if opt.PublishTimeout <= 0 {
		opt.PublishTimeout = 10 * time.Second
	}
	if opt.ItemsInterval <= 0 {
		opt.ItemsInterval = time.Second
	}
	r := &Relay{rdb: rdb, keys: keys, pub: pub, opt: opt, known: map[string]bool{}, backlog: map[string]int64{}}
	if opt.Items == nil {
		r.opt.Items = func(ctx context.Context) ([]string, error) {
			return rdb.SMembers(ctx, keys.Catalog()).Result()
		}
	}
	// The ranking stream is always relayed; item streams are added as items appear.
	r.streams = []stream{{key: keys.RankOutbox(), retry: true, claimCursor: "0-0"}}
	return r
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	return Stats{Published: r.published.Load(), Failures: r.failures.Load(), Claimed: r.claimed.Load()}
}

// Run relays until ctx ends (then it returns nil after the batch in flight, if any, was
// acknowledged or left pending). Redis and Kafka errors are logged and retried with backoff:
// entries wait in Redis meanwhile, and the api keeps selling. Only AfterPublish's error stops it.
func (r *Relay) Run(ctx context.Context) error {
	slog.Info("outbox relay started", "consumer", r.opt.Consumer, "group", r.opt.Group)
	var fails int
	var lastBacklog time.Time
	for ctx.Err() == nil {
		n, err := r.Poll(ctx)
		var stop *hookError
		if errors.As(err, &stop) {
			return stop.err
		}
		// Measured every 2 s, and on every round while over (or near) the bound so purchases
		// resume as soon as the backlog drains.
		near := r.opt.Max > 0 && r.total.Load() > r.opt.Max/2
		if near || time.Since(lastBacklog) > 2*time.Second || (err != nil && fails == 0) {
			lastBacklog = time.Now()
			if total, berr := r.MeasureBacklog(ctx); berr == nil && (err != nil || total > 10*r.opt.ReadCount) {
				slog.Warn("outbox backlog", "entries", total, "publish_error", errString(err))
			}
		}
		switch {
		case err != nil && ctx.Err() == nil:
			fails++
			if fails == 1 || fails%20 == 0 {
				slog.Warn("outbox relay: will retry", "err", err, "attempt", fails)
			}
			sleep(ctx, retryWait(fails))
		case n == 0:
			if fails > 0 {
				slog.Info("outbox relay: recovered", "after_attempts", fails)
			}
			fails = 0
			sleep(ctx, r.opt.PollInterval)
		default:
			if fails > 0 {
				slog.Info("outbox relay: recovered", "after_attempts", fails)
			}
			fails = 0
		}
	}
	slog.Info("outbox relay stopped", "published", r.published.Load())
	return nil
}

// hookError carries AfterPublish's error out of Poll to stop Run.
type hookError struct{ err error }

func (h *hookError) Error() string { return "outbox: AfterPublish: " + h.err.Error() }
func (h *hookError) Unwrap() error { return h.err }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// entry is one outbox entry read in a poll.
type entry struct {
	stream int
	id     string
	msg    kafka.Message
}

// Poll does one round (Run calls it in a loop; a Relay is used by one goroutine): read (and,
// every ClaimInterval, claim) entries, publish them in one Kafka write, then acknowledge and
// delete them. It returns how many entries it published.
func (r *Relay) Poll(ctx context.Context) (int, error) {
	if err := r.refreshStreams(ctx); err != nil {
		return 0, err
	}
	batch, err := r.read(ctx)
	if err != nil {
		return 0, err
	}
	if time.Since(r.lastClaim) >= r.opt.ClaimInterval {
		claimed, err := r.claim(ctx)
		if err != nil {
			return 0, err
		}
		r.lastClaim = time.Now()
		batch = appendNew(batch, claimed)
	}
	if len(batch) == 0 {
		return 0, nil
	}
	msgs := make([]kafka.Message, len(batch))
	for i, e := range batch {
		msgs[i] = e.msg
	}
	pctx, cancel := context.WithTimeout(ctx, r.opt.PublishTimeout)
	err = r.pub.WriteMessages(pctx, msgs...)
	cancel()
	if err != nil {
		// Nothing is acknowledged: every entry stays pending for this consumer and is
		// re-published (duplicates are absorbed downstream by event_id).
		r.failures.Add(1)
		metrics.RelayErrors.Inc()
		for _, e := range batch {
			r.streams[e.stream].retry = true
		}
		return 0, fmt.Errorf("outbox: publish %d events: %w", len(batch), summarize(err))
	}
	if r.opt.AfterPublish != nil {
		if err := r.opt.AfterPublish(len(batch)); err != nil {
			return 0, &hookError{err}
		}
	}
	if err := r.ack(ctx, batch); err != nil {
		// Published but still in Redis: they will be published again (harmless duplicates).
		return 0, err
	}
	r.published.Add(int64(len(batch)))
	metrics.RelayPublished.Add(float64(len(batch)))
	return len(batch), nil
}

// summarize shortens kafka-go's per-message errors (usually one cause repeated) to one line.
func summarize(err error) error {
	var we kafka.WriteErrors
	if !errors.As(err, &we) {
		return err
	}
	for _, e := range we {
		if e != nil {
			return fmt.Errorf("%d of %d messages failed, first: %w", we.Count(), len(we), e)
		}
	}
	return err
}

// appendNew appends the claimed entries not already in batch: after a long Kafka outage this
// consumer's own pending entries are both re-read and idle long enough to be claimed.
func appendNew(batch, claimed []entry) []entry {
	type ref struct {
		stream int
		id     string
	}
	seen := make(map[ref]bool, len(batch))
	for _, e := range batch {
		seen[ref{e.stream, e.id}] = true
	}
	for _, e := range claimed {
		if !seen[ref{e.stream, e.id}] {
			batch = append(batch, e)
		}
	}
	return batch
}

// refreshStreams adds the streams of new items and makes sure each has the consumer group.
func (r *Relay) refreshStreams(ctx context.Context) error {
	if time.Since(r.lastItems) >= r.opt.ItemsInterval {
		items, err := r.opt.Items(ctx)
		if err != nil {
			return fmt.Errorf("outbox: list items: %w", err)
		}
		have := make(map[string]bool, len(r.streams))
		for _, s := range r.streams {
			have[s.key] = true
		}
		for _, id := range items {
			if k := r.keys.Item(id).Outbox(); !have[k] && keyspace.ValidID(id) {
				have[k] = true
				// retry: first look for entries this consumer name left pending.
				r.streams = append(r.streams, stream{key: k, item: id, retry: true, claimCursor: "0-0"})
			}
		}
		r.lastItems = time.Now()
	}
	var missing []string
	for _, s := range r.streams {
		if !r.known[s.key] {
			missing = append(missing, s.key)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.StatusCmd, len(missing))
	for i, k := range missing {
		// From "0": entries written before any relay ran are relayed too.
		cmds[i] = pipe.XGroupCreateMkStream(ctx, k, r.opt.Group, "0")
	}
	_, _ = pipe.Exec(ctx)
	for i, k := range missing {
		if err := cmds[i].Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return fmt.Errorf("outbox: create group on %s: %w", k, err)
		}
		r.known[k] = true
	}
	return nil
}

// read takes up to ReadCount entries from every stream in one pipeline.
func (r *Relay) read(ctx context.Context) ([]entry, error) {
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.XStreamSliceCmd, len(r.streams))
	for i, s := range r.streams {
		id := ">"
		if s.retry {
			id = "0"
		}
		cmds[i] = pipe.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: r.opt.Group, Consumer: r.opt.Consumer, Streams: []string{s.key, id},
			Count: r.opt.ReadCount, Block: -1, // never block: one slow stream must not hold the others
		})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !isNoGroup(err) {
		return nil, fmt.Errorf("outbox: read: %w", err)
	}
	var out []entry
	for i, cmd := range cmds {
		res, err := cmd.Result()
		if isNoGroup(err) {
			// The stream was deleted (and its group with it): create it again next poll.
			delete(r.known, r.streams[i].key)
			continue
		}
		var msgs []redis.XMessage
		if len(res) > 0 {
			msgs = res[0].Messages
		}
		if r.streams[i].retry && len(msgs) == 0 {
			r.streams[i].retry = false // own pending entries drained: read new ones next
		}
		for _, m := range msgs {
			out = append(out, r.entry(i, m))
		}
	}
	return out, nil
}

func isNoGroup(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOGROUP") }

// claim takes over entries other consumers left unacknowledged for ClaimIdle.
func (r *Relay) claim(ctx context.Context) ([]entry, error) {
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.XAutoClaimCmd, len(r.streams))
	for i, s := range r.streams {
		if !r.known[s.key] {
			continue
		}
		cmds[i] = pipe.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: s.key, Group: r.opt.Group, Consumer: r.opt.Consumer,
			MinIdle: r.opt.ClaimIdle, Start: s.claimCursor, Count: r.opt.ReadCount,
		})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !isNoGroup(err) {
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	var out []entry
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		msgs, next, err := cmd.Result()
		if err != nil {
			continue
		}
		r.streams[i].claimCursor = next
		for _, m := range msgs {
			if m.Values == nil {
				continue // deleted while pending (only reported by Redis < 7)
			}
			out = append(out, r.entry(i, m))
		}
		if len(msgs) > 0 {
			r.claimed.Add(int64(len(msgs)))
			slog.Info("outbox relay: claimed entries of a stalled consumer", "stream", r.streams[i].key, "entries", len(msgs))
		}
	}
	return out, nil
}

// entry turns a stream entry into its Kafka message. A malformed entry (a script bug) is still
// published, as an envelope the consumer will park in its dead letters: it is never dropped
// silently, and it cannot block the stream behind it.
func (r *Relay) entry(i int, m redis.XMessage) entry {
	s := r.streams[i]
	var eventID string
	if s.item == "" {
		eventID = events.RatingEventID(m.ID)
	} else {
		eventID = events.ItemEventID(s.item, m.ID)
	}
	key := s.item
	if key == "" {
		key, _ = m.Values["item"].(string)
	}
	var value []byte
	ev, err := events.FromEntry(eventID, m.Values)
	if err == nil {
		value, err = json.Marshal(ev)
	}
	if err != nil {
		slog.Error("outbox relay: malformed outbox entry; publishing it for the dead letters", "event_id", eventID, "err", err)
		value, _ = json.Marshal(map[string]any{"event_id": eventID, "invalid_entry": m.Values, "error": err.Error()})
	}
	return entry{stream: i, id: m.ID, msg: kafka.Message{Key: []byte(key), Value: value}}
}

// ack acknowledges and deletes published entries, in one pipeline.
func (r *Relay) ack(ctx context.Context, batch []entry) error {
	ids := map[int][]string{}
	for _, e := range batch {
		ids[e.stream] = append(ids[e.stream], e.id)
	}
	pipe := r.rdb.Pipeline()
	for i, list := range ids {
		pipe.XAck(ctx, r.streams[i].key, r.opt.Group, list...)
		pipe.XDel(ctx, r.streams[i].key, list...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		for i := range ids {
			r.streams[i].retry = true
		}
		return fmt.Errorf("outbox: acknowledge: %w", err)
	}
	return nil
}

// Backlog returns, as last measured, how many entries wait in the outbox streams (not yet published and
// acknowledged), in total and by item ("rank" for the ratings stream). Acknowledged entries
// are deleted, so a stream's length is its backlog.
func (r *Relay) Backlog() (total int64, byItem map[string]int64) {
	r.backlogMu.Lock()
	defer r.backlogMu.Unlock()
	byItem = make(map[string]int64, len(r.backlog))
	for k, v := range r.backlog {
		byItem[k] = v
		total += v
	}
	return total, byItem
}

// MeasureBacklog measures every known stream's length now, exports it as a metric and returns
// the total (Run calls it every few seconds). Not safe to call while Run is running.
func (r *Relay) MeasureBacklog(ctx context.Context) (int64, error) {
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(r.streams))
	for i, s := range r.streams {
		cmds[i] = pipe.XLen(ctx, s.key)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	var total int64
	r.backlogMu.Lock()
	defer r.backlogMu.Unlock()
	for i, s := range r.streams {
		label := s.item
		if label == "" {
			label = "rank"
		}
		n := cmds[i].Val()
		r.backlog[label] = n
		metrics.OutboxBacklog.WithLabelValues(label).Set(float64(n))
		total += n
	}
	r.total.Store(total)
	return total, nil
}
