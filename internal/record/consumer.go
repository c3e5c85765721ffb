package record

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/segmentio/kafka-go"
	"gorm.io/gorm"

	"github.com/flashsale/flashsale/internal/kafkaconn"
	"github.com/flashsale/flashsale/internal/metrics"
)

// ConsumerOptions configure a Consumer; zero values take the defaults.
type ConsumerOptions struct {
	Brokers []string
	Topic   string
	// GroupID is the Kafka consumer group (default "reconciler"): several reconcilers share
	// the topic's partitions.
	GroupID string
	// BatchSize is the most messages written in one transaction (default 2000).
	BatchSize int
	// BatchWait is how long a batch gathers messages (default 20ms), counted from when the
	// previous batch was cut: messages that queued up while the previous batch was written
	// have waited already, so a write longer than BatchWait is followed by the next at once.
	BatchWait time.Duration
	// DrainTimeout bounds the last batch's write and offset commit at shutdown (default 10s).
	DrainTimeout time.Duration
	// LagInterval is how often consumer lag is measured and exported (default 5s).
	LagInterval time.Duration
	// Dialer and Transport carry the brokers' login and TLS (kafkaconn); nil: plaintext.
	Dialer    *kafka.Dialer
	Transport *kafka.Transport
	// AfterCommit, when set, runs after a batch's transaction committed and before its
	// offsets are committed; a non-nil error stops Run with it and the offsets stay
	// uncommitted, as if the process died there (tests use it to prove duplicates are absorbed).
	AfterCommit func(Result) error
	// PaymentProvider labels the payments recorded (FLASHSALE_PAYMENT_PROVIDER).
	PaymentProvider string
}

// Consumer reads the event topic in a consumer group and writes it to the record in batched
// transactions. Offsets are committed only after the batch's transaction committed (beside
// the write loop, which goes on with the next batch meanwhile), so a crash re-delivers at
// most the batches in flight, and the Writer absorbs them.
type Consumer struct {
	w         *Writer
	r         *kafka.Reader
	client    *kafka.Client
	transport *kafka.Transport // the client's: Run closes its connections when it returns
	opt       ConsumerOptions

	cut     time.Time            // when collect last closed a batch (Run's goroutine only)
	commits chan []kafka.Message // batches written, for commitOffsets (Run's)

	lag                     atomic.Int64
	applied, dupes, invalid atomic.Int64
	batches, commitFailures atomic.Int64
}

// ConsumerStats are the consumer's counters since it started.
type ConsumerStats struct {
	Applied, Duplicates, Invalid int64
	Batches                      int64
	CommitFailures               int64 // offset commits that failed (the batch will be re-delivered)
}

// NewConsumer returns a consumer writing to db.
func NewConsumer(db *gorm.DB, opt ConsumerOptions) *Consumer {
	if opt.GroupID == "" {
		opt.GroupID = kafkaconn.ConsumerGroup
	}
	if opt.BatchSize <= 0 {
		opt.BatchSize = 2000
	}
	if opt.BatchWait <= 0 {
		opt.BatchWait = 20 * time.Millisecond
	}
	if opt.DrainTimeout <= 0 {
		opt.DrainTimeout = 10 * time.Second
	}
	if opt.LagInterval <= 0 {
		opt.LagInterval = 5 * time.Second
	}
	// Its own transport: the shared default one keeps dead connections after a broker
	// restart, and lag must be measurable right after an outage.
	transport := &kafka.Transport{}
	if opt.Transport != nil {
		transport = opt.Transport
	}
	return &Consumer{
		w:         &Writer{db: db, Provider: opt.PaymentProvider},
		client:    &kafka.Client{Addr: kafka.TCP(opt.Brokers...), Timeout: 5 * time.Second, Transport: transport},
		transport: transport,
		opt:       opt,
	}
}

// newReader builds the group reader. It joins the group as soon as it exists, so Run makes it:
// a member that joined but does not fetch would sit on its partitions.
func (c *Consumer) newReader() *kafka.Reader {
	return kafka.NewReader(kafka.ReaderConfig{
		Brokers:     c.opt.Brokers,
		Dialer:      c.opt.Dialer,
		Topic:       c.opt.Topic,
		GroupID:     c.opt.GroupID,
		StartOffset: kafka.FirstOffset, // a new group reads the topic from the start
		MinBytes:    1,
		MaxBytes:    16 << 20,
		MaxWait:     250 * time.Millisecond,
		// Offsets are committed by Run, synchronously, after the transaction.
		CommitInterval: 0,
		QueueCapacity:  c.opt.BatchSize,
		ReadBackoffMin: 50 * time.Millisecond,
		ReadBackoffMax: time.Second,
		ErrorLogger:    kafka.LoggerFunc(func(msg string, args ...any) { slog.Warn("kafka reader: " + fmt.Sprintf(msg, args...)) }),
	})
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ConsumerStats {
	return ConsumerStats{
		Applied: c.applied.Load(), Duplicates: c.dupes.Load(), Invalid: c.invalid.Load(),
		Batches: c.batches.Load(), CommitFailures: c.commitFailures.Load(),
	}
}

// Lag is the consumer group's lag as last measured (messages not yet committed).
func (c *Consumer) Lag() int64 { return c.lag.Load() }

// Run consumes until ctx ends: then the batch being collected is written and its offsets
// committed (within DrainTimeout), the group is left, and Run returns nil. Postgres errors
// are retried with backoff without committing; only AfterCommit's error stops Run early.
func (c *Consumer) Run(ctx context.Context) error {
	c.r = c.newReader()
	defer func() {
		if err := c.r.Close(); err != nil {
			slog.Warn("reconciler: closing the Kafka reader", "err", err)
		}
	}()
	// Offsets are committed beside the loop; before the reader closes (defers run last
	// first), the offsets of every batch written are committed.
	c.commits = make(chan []kafka.Message, 64)
	committed := make(chan struct{})
	go func() {
		defer close(committed)
		c.commitOffsets(ctx)
	}()
	defer func() {
		close(c.commits)
		<-committed
	}()
	lagCtx, stopLag := context.WithCancel(ctx)
	lagDone := make(chan struct{})
	go func() {
		defer close(lagDone)
		c.watchLag(lagCtx)
	}()
	defer func() {
		stopLag()
		<-lagDone
		c.transport.CloseIdleConnections() // the lag queries' (a goroutine each otherwise)
	}()
	slog.Info("reconciler consuming", "topic", c.opt.Topic, "group", c.opt.GroupID, "brokers", c.opt.Brokers)

	fetchBackoff, fetchFails := retryBackoff(5*time.Second), 0
	for {
		batch, err := c.collect(ctx)
		if err == nil && fetchFails > 0 {
			slog.Info("reconciler: fetching again", "after_attempts", fetchFails)
			fetchBackoff.Reset()
			fetchFails = 0
		}
		if len(batch) > 0 {
			if perr := c.process(ctx, batch); perr != nil {
				return perr
			}
		}
		if ctx.Err() != nil {
			st := c.Stats()
			slog.Info("reconciler stopped", "applied", st.Applied, "duplicates", st.Duplicates, "invalid", st.Invalid)
			return nil
		}
		if err != nil {
			// Kafka down: one warning, then one every 20 attempts, not one per retry.
			if fetchFails++; fetchFails == 1 || fetchFails%20 == 0 {
				slog.Warn("reconciler: fetch failed; retrying", "err", err, "attempt", fetchFails)
			}
			sleep(ctx, fetchBackoff.NextBackOff())
		}
	}
}

// collect waits for one message, then gathers more until BatchWait after the previous batch
// was cut, and at least until no more is queued (none within a millisecond).
func (c *Consumer) collect(ctx context.Context) ([]kafka.Message, error) {
	first, err := c.r.FetchMessage(ctx)
	if err != nil {
		return nil, err
	}
	batch := []kafka.Message{first}
	defer func() { c.cut = time.Now() }()
	fctx, cancel := context.WithDeadline(ctx, c.cut.Add(c.opt.BatchWait))
	defer cancel()
	for len(batch) < c.opt.BatchSize {
		m, err := c.r.FetchMessage(fctx)
		if err != nil {
			break // the window is over (or shutdown)
		}
		batch = append(batch, m)
	}
	// Whatever queued up meanwhile (a window that closed while the previous batch was
	// written, or a burst at its end) joins the batch without a further wait.
	for len(batch) < c.opt.BatchSize && ctx.Err() == nil {
		m, err := c.fetchQueued(ctx)
		if err != nil {
			break
		}
		batch = append(batch, m)
	}
	return batch, nil
}

// fetchQueued is FetchMessage for a message already queued (or arriving within a millisecond).
func (c *Consumer) fetchQueued(ctx context.Context) (kafka.Message, error) {
	qctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	return c.r.FetchMessage(qctx)
}

// process writes a batch (retrying while Postgres fails) and then hands its offsets to
// commitOffsets.
func (c *Consumer) process(ctx context.Context, batch []kafka.Message) error {
	var res Result
	wait := retryBackoff(5 * time.Second)
	for attempt := 1; ; attempt++ {
		// The write is not cancelled by shutdown: a batch already fetched is finished.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opt.DrainTimeout)
		start := time.Now()
		var err error
		res, err = c.w.ApplyIsolating(wctx, batch)
		cancel()
		if err == nil {
			metrics.ReconcilerCommitDuration.Observe(time.Since(start).Seconds())
			break
		}
		if ctx.Err() != nil {
			// Shutting down with Postgres failing: leave the offsets uncommitted; the next
			// consumer of these partitions re-delivers the batch.
			slog.Error("reconciler: batch not written at shutdown; it will be re-delivered", "err", err, "messages", len(batch))
			return nil
		}
		slog.Warn("reconciler: writing a batch failed; retrying", "err", err, "attempt", attempt, "messages", len(batch))
		sleep(ctx, wait.NextBackOff())
	}
	c.applied.Add(int64(res.Applied))
	c.dupes.Add(int64(res.Duplicates))
	c.invalid.Add(int64(res.Invalid))
	c.batches.Add(1)
	metrics.ConsumerEvents.WithLabelValues("applied").Add(float64(res.Applied))
	metrics.ConsumerEvents.WithLabelValues("duplicate").Add(float64(res.Duplicates))
	metrics.ConsumerEvents.WithLabelValues("invalid").Add(float64(res.Invalid))
	metrics.RecordConflicts.Add(float64(res.Conflicts))
	metrics.ReconcilerBatchSize.Observe(float64(len(batch)))

	if c.opt.AfterCommit != nil {
		if err := c.opt.AfterCommit(res); err != nil {
			return fmt.Errorf("record: AfterCommit: %w", err)
		}
	}
	c.commits <- batch
	return nil
}

// commitOffsets commits the written batches' offsets, in order, until c.commits is closed, so
// the write loop never waits for a Kafka round trip; batches queued meanwhile commit together.
// Offsets only follow their batch's transaction, so a crash re-delivers at most the uncommitted
// batches, which the Writer absorbs.
func (c *Consumer) commitOffsets(ctx context.Context) {
	for batch := range c.commits {
		newest := map[int]kafka.Message{}
		add := func(b []kafka.Message) {
			for _, m := range b {
				if n, ok := newest[m.Partition]; !ok || m.Offset > n.Offset {
					newest[m.Partition] = m
				}
			}
		}
		add(batch)
	more:
		for {
			select {
			case b, ok := <-c.commits:
				if !ok {
					break more
				}
				add(b)
			default:
				break more
			}
		}
		msgs := make([]kafka.Message, 0, len(newest))
		for _, m := range newest {
			msgs = append(msgs, m)
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opt.DrainTimeout)
		if err := c.r.CommitMessages(cctx, msgs...); err != nil {
			// The rows are committed; a re-delivery of these batches is absorbed as duplicates.
			c.commitFailures.Add(1)
			slog.Warn("reconciler: offset commit failed; the batch may be re-delivered", "err", err)
		}
		cancel()
	}
}

// retryBackoff is the consumer's wait between retries: exponential from 200 ms up to ceiling,
// with ±50% jitter (cenkalti/backoff) so reconcilers that lost Kafka or Postgres together do
// not come back in step.
func retryBackoff(ceiling time.Duration) *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{InitialInterval: 200 * time.Millisecond, RandomizationFactor: 0.5,
		Multiplier: 2, MaxInterval: ceiling}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// watchLag measures the lag every LagInterval, exports it and logs it while it is not zero.
func (c *Consumer) watchLag(ctx context.Context) {
	t := time.NewTicker(c.opt.LagInterval)
	defer t.Stop()
	var last int64 = -1
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lag, err := c.MeasureLag(ctx)
		if err != nil {
			// Drop pooled connections that may point at a broker that went away.
			c.client.Transport.(*kafka.Transport).CloseIdleConnections()
			if ctx.Err() == nil {
				slog.Warn("reconciler: measuring consumer lag", "err", err)
			}
			continue
		}
		if lag > 0 || last > 0 {
			slog.Info("reconciler: consumer lag", "messages", lag)
		}
		last = lag
	}
}

// ErrNoTopic means the event topic does not exist (yet) on the brokers.
var ErrNoTopic = kafkaconn.ErrNoTopic

// MeasureLag asks the brokers for the group's lag now (kafkaconn.Lag: the one definition the
// monitor and batch reconciliation use too) and exports it.
func (c *Consumer) MeasureLag(ctx context.Context) (int64, error) {
	lag, err := kafkaconn.Lag(ctx, c.client, c.opt.Topic, c.opt.GroupID)
	if err != nil {
		return 0, fmt.Errorf("record: %w", err)
	}
	c.lag.Store(lag)
	metrics.ConsumerLag.Set(float64(lag))
	return lag, nil
}
