// Package outbox owns the relay from the Redis outbox streams to Kafka. Every script that
// changes state appends its event to its shard's stream in the same call; the relay removes an
// entry only after Kafka acknowledged it (acks=all), so each event is published at least once
// and the consumer de-duplicates on event_id.
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/metrics"
	"github.com/flashsale/flashsale/internal/redisconn"
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
	// Block is how long one read waits for new entries before it asks again (default 1s):
	// a new entry is read the moment it is written, and an idle stream costs one command per
	// Block.
	Block time.Duration
	// ReadCount is the most entries one batch holds (default 500). An entry is one event, or a
	// purchase batch's up to 256 order.reserved events.
	ReadCount int64
	// MaxBatchBytes is the most message bytes (keys and values) one Kafka write carries
	// (default 1 MiB); a read holding more is published in several writes, in order.
	MaxBatchBytes int
	// ClaimIdle: entries another consumer read but has not acknowledged for this long are
	// taken over (its process crashed or hangs). Default 30s.
	ClaimIdle time.Duration
	// ClaimInterval is how often each stream is searched for such entries (default 5s).
	ClaimInterval time.Duration
	// PublishTimeout bounds one Kafka publish (default 10s).
	PublishTimeout time.Duration
	// BacklogInterval is how often the streams' lengths are measured (default 2s).
	BacklogInterval time.Duration
	// Max bounds the outbox: while every stream together holds more entries than this (Kafka
	// unreachable for long), Admit refuses new purchases instead of letting Redis run out of
	// memory. 0 = no bound. A purchase batch's orders share one entry, so the bound counts
	// entries, not orders.
	Max int64
	// AfterPublish, when set, runs after Kafka acknowledged a batch (of published events) and before the entries are
	// acknowledged in Redis; a non-nil error stops Run with it, leaving the entries pending
	// as a crashed process would (tests use it to prove nothing is lost). It may be called
	// from several goroutines at once (one per stream).
	AfterPublish func(published int) error
	// Events, when set, is given the events of each batch of an item stream before it is
	// published (the users' order indexes and versions are written from them); an error keeps
	// the batch's entries for the retry, as a failed publish does. It may be called from
	// several goroutines at once (one per stream).
	Events func(ctx context.Context, evs []events.Event) error
}

// Stats are the relay's counters since it started.
type Stats struct {
	Published int64 // events published and acknowledged
	Failures  int64 // failed publish attempts
	Claimed   int64 // entries (not events) taken over from other consumers
}

// Relay moves outbox entries to Kafka: one goroutine per stream (each shard's and the ranking
// slot's), each blocking on its stream, so the relay's cost follows the events, not the items.
// Any number of relays (one per api instance) may run at once: the consumer group gives each
// entry to one of them, and entries of a relay that died are claimed by another after ClaimIdle.
type Relay struct {
	rdb  redis.UniversalClient
	keys keyspace.Space
	pub  Publisher
	opt  Options

	streams []*stream

	// hard bounds the publish and acknowledgement in flight when Run's context ends; Abort
	// ends it (a shutdown out of time).
	hard  context.Context
	abort context.CancelFunc

	published, failures, claimed atomic.Int64

	backlogMu sync.Mutex
	backlog   map[string]int64 // by stream label ("s<n>", "rank")
	total     atomic.Int64     // entries in every stream at the last measure
}

// ErrFull refuses a purchase while the outbox is over its bound (Options.Max).
var ErrFull = errors.New("the event outbox is over its bound (Kafka unreachable?); nothing was changed, try again later")

// Admit refuses new purchases (ErrFull) while the outbox is over Options.Max. Every relay
// measures every stream, so every api instance sees the same total within a measure interval.
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

// stream is one outbox stream and how to read it next; only its own goroutine touches it.
type stream struct {
	key   string
	label string
	rank  bool // the ranking stream: its event ids differ
	// retry: acknowledging entries of this stream failed (or the relay just started);
	// re-read this consumer's own pending entries (ID "0") before new ones, so the backlog
	// drains in order.
	retry bool
	// unpublished: entries whose publish failed, retried from here before anything else. Not
	// re-read: a read makes them look fresh to XAUTOCLAIM, so a relay cut off from Kafka would
	// keep them from the relays that can publish for as long as it is cut off.
	unpublished []entry
	grouped     bool // the consumer group exists
	// idle: the last read found nothing new, so the next one blocks at once; while entries
	// keep coming, a read first takes what is there without blocking, with the WAIT that
	// confirms it behind it (readConfirmed).
	idle        bool
	claimCursor string
	lastClaim   time.Time
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
	if opt.Block <= 0 {
		opt.Block = time.Second
	}
	if opt.ReadCount <= 0 {
		opt.ReadCount = 500
	}
	if opt.MaxBatchBytes <= 0 {
		opt.MaxBatchBytes = 1 << 20
	}
	if opt.ClaimIdle <= 0 {
		opt.ClaimIdle = 30 * time.Second
	}
	if opt.ClaimInterval <= 0 {
		opt.ClaimInterval = 5 * time.Second
	}
	if opt.PublishTimeout <= 0 {
		opt.PublishTimeout = 10 * time.Second
	}
	if opt.BacklogInterval <= 0 {
		opt.BacklogInterval = 2 * time.Second
	}
	r := &Relay{rdb: ownPool(rdb, StreamCount()+4), keys: keys, pub: pub, opt: opt, backlog: map[string]int64{}}
	r.hard, r.abort = context.WithCancel(context.Background())
	r.streams = append(r.streams, &stream{key: keys.RankOutbox(), label: "rank", rank: true, retry: true, claimCursor: "0-0"})
	for n := range keyspace.Shards {
		r.streams = append(r.streams, &stream{key: keys.Shard(n).Outbox(), label: "s" + strconv.Itoa(n), retry: true, claimCursor: "0-0"})
	}
	return r
}

// ownPool returns a client like rdb (same servers, login, TLS) with a pool of its own of size
// connections per node: the relay's blocking reads each hold a connection for up to Block, so
// on the caller's pool they would queue purchases behind them. Run closes it when it returns.
func ownPool(rdb redis.UniversalClient, size int) redis.UniversalClient {
	return redisconn.WithPool(rdb, size)
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	return Stats{Published: r.published.Load(), Failures: r.failures.Load(), Claimed: r.claimed.Load()}
}

// Run relays until ctx ends, then returns nil once the batches in flight are acknowledged or
// left pending (within PublishTimeout or until Abort). Redis and Kafka errors are logged and
// retried with backoff while entries wait in Redis; only AfterPublish's error stops it. Its
// blocking reads use the relay's own pool (ownPool).
func (r *Relay) Run(ctx context.Context) error {
	slog.Info("outbox relay started", "consumer", r.opt.Consumer, "group", r.opt.Group, "streams", len(r.streams))
	defer r.rdb.Close()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var wg sync.WaitGroup
	for _, st := range r.streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.runStream(ctx, st); err != nil {
				stop(err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.measureLoop(ctx)
	}()
	wg.Wait()
	// What is left (this relay's unpublished entries, and any others'): for the next relay.
	mctx, cancel := context.WithTimeout(r.hard, time.Second)
	left, err := r.MeasureBacklog(mctx)
	cancel()
	if err != nil {
		left = -1 // unknown
	}
	slog.Info("outbox relay stopped", "published", r.published.Load(), "outbox_backlog", left)
	var hook *hookError
	if err := context.Cause(ctx); errors.As(err, &hook) {
		return hook.err
	}
	return nil
}

// Abort cuts short a Run whose context ended: a publish or acknowledgement still in flight
// ends at once. Its entries stay pending in Redis, re-published by another relay after
// ClaimIdle (the consumer absorbs a duplicate of a batch Kafka had taken). For a shutdown
// that ran out of time.
func (r *Relay) Abort() { r.abort() }

// StreamCount is how many streams a relay reads, each with a blocking read of its own.
func StreamCount() int { return keyspace.Shards + 1 }

// runStream relays one stream until ctx ends or AfterPublish fails.
func (r *Relay) runStream(ctx context.Context, st *stream) error {
	var fails int
	for ctx.Err() == nil {
		n, err := r.pollStream(ctx, st)
		var stop *hookError
		if errors.As(err, &stop) {
			return stop
		}
		switch {
		case err != nil && ctx.Err() == nil:
			fails++
			if fails == 1 || fails%20 == 0 {
				slog.Warn("outbox relay: will retry", "stream", st.label, "err", err, "attempt", fails)
			}
			sleep(ctx, retryWait(fails))
		case err == nil && fails > 0:
			slog.Info("outbox relay: recovered", "stream", st.label, "after_attempts", fails, "published", n)
			fails = 0
		}
	}
	return nil
}

// measureLoop measures the backlog every BacklogInterval, and more often while near the bound
// so purchases resume as soon as the backlog drains.
func (r *Relay) measureLoop(ctx context.Context) {
	for ctx.Err() == nil {
		if total, err := r.MeasureBacklog(ctx); err == nil && total > 10*r.opt.ReadCount {
			slog.Warn("outbox backlog", "entries", total)
		}
		wait := r.opt.BacklogInterval
		if r.opt.Max > 0 && r.total.Load() > r.opt.Max/2 {
			wait = min(wait, 100*time.Millisecond)
		}
		sleep(ctx, wait)
	}
}

// hookError carries AfterPublish's error out of a stream's loop to stop Run.
type hookError struct{ err error }

func (h *hookError) Error() string { return "outbox: AfterPublish: " + h.err.Error() }
func (h *hookError) Unwrap() error { return h.err }

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// entry is one outbox entry read from a stream and its Kafka messages: one, or one per order
// of a purchase batch.
type entry struct {
	id   string
	msgs []kafka.Message
	// evs are the entry's events (an item stream's), for Options.Events.
	evs []events.Event
}

// pollStream does one round on one stream: retry a failed publish's entries or read new ones
// (claiming stalled consumers' every ClaimInterval), then publish in writes of at most
// MaxBatchBytes, each acknowledged before the next, so a backlog drains in order in bounded
// steps. It returns how many entries it published.
func (r *Relay) pollStream(ctx context.Context, st *stream) (int, error) {
	if !st.grouped {
		// From "0": entries written before any relay ran are relayed too.
		err := r.rdb.XGroupCreateMkStream(ctx, st.key, r.opt.Group, "0").Err()
		if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return 0, fmt.Errorf("outbox: create group on %s: %w", st.key, err)
		}
		st.grouped = true
	}
	var batch []entry
	confirmed := false // the replicas required hold every entry of batch
	if len(st.unpublished) > 0 {
		// Retry these before anything else, claiming nothing meanwhile; a failure below puts
		// what is left back. With all of them claimed by other relays, read new ones.
		mine, err := r.stillPending(ctx, st)
		if err != nil {
			return 0, err
		}
		batch, st.unpublished = mine, nil
	} else if time.Since(st.lastClaim) >= r.opt.ClaimInterval {
		claimed, err := r.claim(ctx, st)
		if err != nil {
			return 0, err
		}
		st.lastClaim = time.Now()
		batch = claimed
	}
	if len(batch) == 0 {
		read, ok, err := r.read(ctx, st)
		if err != nil {
			return 0, err
		}
		batch, confirmed = read, ok
	}
	published := 0
	for len(batch) > 0 {
		n := chunk(batch, r.opt.MaxBatchBytes)
		if err := r.publish(st, batch[:n], confirmed); err != nil {
			if errors.Is(err, errUnpublished) {
				st.unpublished = batch
			}
			return published, err
		}
		published += n
		batch = batch[n:]
	}
	return published, nil
}

// chunk returns how many leading entries' messages fit in maxBytes (at least one entry).
func chunk(batch []entry, maxBytes int) int {
	size := 0
	for i, e := range batch {
		for _, m := range e.msgs {
			size += len(m.Key) + len(m.Value)
		}
		if size > maxBytes && i > 0 {
			return i
		}
	}
	return len(batch)
}

// maxAckIDs is the most ids one outbox/ack.lua call takes.
const maxAckIDs = 10000

// publish writes entries to Kafka, then acknowledges them and removes them from the stream.
// With replicas required (FLASHSALE_REDIS_ACK_REPLICAS), it first waits until they hold the
// entries, unless the read already confirmed them: an entry a failover could still lose is
// published later, never now.
func (r *Relay) publish(st *stream, batch []entry, confirmed bool) error {
	if !confirmed && exactlyonce.RequiresReplicas(r.rdb) {
		cctx, cancel := context.WithTimeout(r.hard, exactlyonce.CallDeadline)
		err := confirmScript.Run(cctx, r.rdb, []string{st.key}).Err()
		cancel()
		if err != nil {
			r.failures.Add(1)
			metrics.RelayErrors.Inc()
			return fmt.Errorf("%w: %d events: the Redis replicas do not hold them yet: %w", errUnpublished, len(batch), err)
		}
	}
	if r.opt.Events != nil {
		var evs []events.Event
		for _, e := range batch {
			evs = append(evs, e.evs...)
		}
		if len(evs) > 0 {
			cctx, cancel := context.WithTimeout(r.hard, exactlyonce.CallDeadline)
			err := r.opt.Events(cctx, evs)
			cancel()
			if err != nil {
				r.failures.Add(1)
				metrics.RelayErrors.Inc()
				return fmt.Errorf("%w: %d events: %w", errUnpublished, len(evs), err)
			}
		}
	}
	var msgs []kafka.Message
	if len(batch) == 1 {
		msgs = batch[0].msgs
	} else {
		n := 0
		for _, e := range batch {
			n += len(e.msgs)
		}
		msgs = make([]kafka.Message, 0, n)
		for _, e := range batch {
			msgs = append(msgs, e.msgs...)
		}
	}
	// Not cut by Run's context (a shutdown lets the batch in hand finish), only by Abort.
	pctx, cancel := context.WithTimeout(r.hard, r.opt.PublishTimeout)
	err := r.pub.WriteMessages(pctx, msgs...)
	cancel()
	if err != nil {
		// Nothing is acknowledged: every entry stays pending for this consumer and is
		// re-published (duplicates are absorbed downstream by event_id).
		r.failures.Add(1)
		metrics.RelayErrors.Inc()
		return fmt.Errorf("%w: %d events: %w", errUnpublished, len(msgs), summarize(err))
	}
	if r.opt.AfterPublish != nil {
		if err := r.opt.AfterPublish(len(msgs)); err != nil {
			return &hookError{err}
		}
	}
	// Acknowledge and remove (outbox/ack.lua) in calls of at most maxAckIDs ids, ascending.
	for len(batch) > 0 {
		n := min(len(batch), maxAckIDs)
		args := make([]any, 0, n+1)
		args = append(args, r.opt.Group)
		acked := 0 // events
		for _, e := range batch[:n] {
			args = append(args, e.id)
			acked += len(e.msgs)
		}
		if err := ackScript.Run(r.hard, r.rdb, []string{st.key}, args...).Err(); err != nil {
			// Published but still in Redis: they will be published again (harmless duplicates).
			st.retry = true
			return fmt.Errorf("outbox: acknowledge: %w", err)
		}
		r.published.Add(int64(acked))
		metrics.RelayPublished.Add(float64(acked))
		batch = batch[n:]
	}
	return nil
}

// errUnpublished: Kafka did not take a batch; its entries are kept for the retry.
var errUnpublished = errors.New("outbox: publish")

// stillPending returns the entries of st.unpublished still pending for this consumer: another
// relay may have claimed the others while this one could not publish. XPENDING leaves their
// idle time alone, so such a claim stays possible.
func (r *Relay) stillPending(ctx context.Context, st *stream) ([]entry, error) {
	u := st.unpublished
	res, err := r.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: st.key, Group: r.opt.Group, Consumer: r.opt.Consumer,
		Start: u[0].id, End: u[len(u)-1].id, Count: int64(len(u)),
	}).Result()
	if isNoGroup(err) {
		st.grouped = false // the stream was deleted, and its entries with it
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: pending entries of %s: %w", st.label, err)
	}
	mine := make(map[string]bool, len(res))
	for _, p := range res {
		mine[p.ID] = true
	}
	kept := make([]entry, 0, len(res))
	for _, e := range u {
		if mine[e.id] {
			kept = append(kept, e)
		}
	}
	return kept, nil
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

// read takes up to ReadCount entries: this consumer's own pending ones first while retrying
// (no wait), else new ones, waiting up to Block for the first. confirmed: the replicas required
// hold them (readConfirmed), so publish need not ask again.
func (r *Relay) read(ctx context.Context, st *stream) (batch []entry, confirmed bool, err error) {
	if !st.retry && !st.idle && exactlyonce.RequiresReplicas(r.rdb) {
		batch, confirmed, err := r.readConfirmed(ctx, st)
		if err != nil || len(batch) > 0 {
			return batch, confirmed, err
		}
		st.idle = true // nothing there: wait for the next entry below
	}
	id, block := ">", r.opt.Block
	if st.retry {
		id, block = "0", -1
	}
	cmd := r.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: r.opt.Group, Consumer: r.opt.Consumer, Streams: []string{st.key, id},
		Count: r.opt.ReadCount, Block: block,
	})
	batch, err = r.entries(st, cmd)
	if id == ">" {
		st.idle = err == nil && len(batch) == 0
	}
	return batch, false, err
}

// readConfirmed reads new entries without blocking, with a WAIT behind the read
// (exactlyonce.WaitBehind): the delivery is a write replicated after the entries, so a confirmed
// WAIT means the replicas hold them and publish needs no round trip of its own. A blocking
// read's entries are confirmed by publish (docs/design.md, "Replication and failover").
func (r *Relay) readConfirmed(ctx context.Context, st *stream) ([]entry, bool, error) {
	var cmd *redis.XStreamSliceCmd
	confirmed, err := exactlyonce.WaitBehind(ctx, r.rdb, st.key, func(pipe redis.Pipeliner) {
		cmd = pipe.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: r.opt.Group, Consumer: r.opt.Consumer, Streams: []string{st.key, ">"},
			Count: r.opt.ReadCount, Block: -1,
		})
	})
	if err != nil {
		return nil, false, fmt.Errorf("outbox: read %s: %w", st.label, err)
	}
	batch, err := r.entries(st, cmd)
	return batch, confirmed && err == nil, err
}

// entries turns a read's reply into entries (none, when the stream or its group is gone).
func (r *Relay) entries(st *stream, cmd *redis.XStreamSliceCmd) ([]entry, error) {
	res, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	if isNoGroup(err) {
		// The stream was deleted (and its group with it): create it again next round.
		st.grouped = false
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: read %s: %w", st.label, err)
	}
	var msgs []redis.XMessage
	if len(res) > 0 {
		msgs = res[0].Messages
	}
	if st.retry && len(msgs) == 0 {
		st.retry = false // own pending entries drained: read new ones next
	}
	out := make([]entry, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, r.entry(st, m))
	}
	return out, nil
}

func isNoGroup(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOGROUP") }

// claim takes over entries other consumers left unacknowledged for ClaimIdle.
func (r *Relay) claim(ctx context.Context, st *stream) ([]entry, error) {
	msgs, next, err := r.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: st.key, Group: r.opt.Group, Consumer: r.opt.Consumer,
		MinIdle: r.opt.ClaimIdle, Start: st.claimCursor, Count: r.opt.ReadCount,
	}).Result()
	if isNoGroup(err) {
		st.grouped = false
		return nil, nil
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("outbox: claim %s: %w", st.label, err)
	}
	st.claimCursor = next
	if st.claimCursor == "" {
		st.claimCursor = "0-0"
	}
	out := make([]entry, 0, len(msgs))
	for _, m := range msgs {
		if m.Values == nil {
			continue // deleted while pending (only reported by Redis < 7)
		}
		out = append(out, r.entry(st, m))
	}
	if len(out) > 0 {
		r.claimed.Add(int64(len(out)))
		slog.Info("outbox relay: claimed entries of a stalled consumer", "stream", st.key, "entries", len(out))
	}
	return out, nil
}

// entry turns a stream entry into its Kafka messages, keyed by the entry's item: one event, or
// one per order of a purchase batch, each with an event_id stable across re-reads. A malformed
// entry is published as one envelope the consumer parks in dead letters, so it is never dropped
// silently and never blocks the stream.
func (r *Relay) entry(st *stream, m redis.XMessage) entry {
	key := []byte(events.EntryItem(m.Values))
	var eventID string
	if st.rank {
		eventID = events.RatingEventID(m.ID)
	} else {
		eventID = events.ItemEventID(string(key), m.ID)
	}
	var err error
	if !st.rank && events.IsBatch(m.Values) {
		var evs []events.Event
		if evs, err = events.FromBatch(m.ID, m.Values); err == nil {
			msgs := make([]kafka.Message, len(evs))
			// One buffer for every event's JSON: about 280 bytes each.
			buf := make([]byte, 0, 300*len(evs))
			for i, ev := range evs {
				start := len(buf)
				if buf, err = ev.AppendJSON(buf); err != nil {
					break
				}
				msgs[i] = kafka.Message{Key: key, Value: buf[start:len(buf):len(buf)]}
			}
			if err == nil {
				return entry{id: m.ID, msgs: msgs, evs: evs}
			}
		}
	} else {
		var ev events.Event
		var value []byte
		if ev, err = events.FromEntry(eventID, m.Values); err == nil {
			value, err = ev.AppendJSON(make([]byte, 0, 320))
		}
		if err == nil {
			e := entry{id: m.ID, msgs: []kafka.Message{{Key: key, Value: value}}}
			if !st.rank {
				e.evs = []events.Event{ev}
			}
			return e
		}
	}
	slog.Error("outbox relay: malformed outbox entry; publishing it for the dead letters", "event_id", eventID, "err", err)
	value, _ := json.Marshal(map[string]any{"event_id": eventID, "invalid_entry": m.Values, "error": err.Error()})
	return entry{id: m.ID, msgs: []kafka.Message{{Key: key, Value: value}}}
}

// Backlog returns, as last measured, how many entries wait in the outbox streams (not yet published and
// acknowledged), in total and by stream ("s<shard>", "rank" for the ratings stream). Acknowledged entries
// are deleted, so a stream's length is its backlog.
func (r *Relay) Backlog() (total int64, byStream map[string]int64) {
	r.backlogMu.Lock()
	defer r.backlogMu.Unlock()
	byStream = make(map[string]int64, len(r.backlog))
	for k, v := range r.backlog {
		byStream[k] = v
		total += v
	}
	return total, byStream
}

// MeasureBacklog measures every stream's length now, exports it as a metric and returns the
// total (Run calls it every BacklogInterval).
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
		n := cmds[i].Val()
		r.backlog[s.label] = n
		metrics.OutboxBacklog.WithLabelValues(s.label).Set(float64(n))
		total += n
	}
	r.total.Store(total)
	return total, nil
}
