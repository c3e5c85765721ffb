// Package reconcile proves that Redis (the live sale) and Postgres (the record) agree and fixes
// where they don't: batch comparison, repair by re-emitting events, restore of Redis from
// Postgres after data loss, pruning of final orders. One run at a time across instances, under a
// Redis lock whose fencing number every write carries.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/datamark"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/lock"
	"github.com/flashsale/flashsale/internal/ranking"
	"github.com/flashsale/flashsale/internal/record"
)

// LockName is the one lock batch, restore and pruning share: they must never overlap.
const LockName = "reconcile"

// Sentinel errors.
var (
	// ErrBusy means another batch, restore or pruning pass holds the lock; the error says who.
	ErrBusy = errors.New("reconcile: another batch, restore or pruning pass is running")
	// ErrFenced means a newer runner has written since this one obtained the lock (this one
	// stalled past its lock's TTL): its writes are refused.
	ErrFenced = record.ErrFenced
	// ErrSelling means restore found the item being sold in Redis (use force to override).
	ErrSelling = errors.New("reconcile: item is live in Redis")
	// ErrNotInRecord means restore was asked for an item Postgres does not have.
	ErrNotInRecord = errors.New("reconcile: item not in Postgres")
)

// Options tune a Reconciler; zero values take the defaults.
type Options struct {
	// LockTTL is the job lock's TTL, refreshed every third of it (default 15s).
	LockTTL time.Duration
	// SettleTimeout bounds how long a run waits for events in flight to reach Postgres
	// (default 30s). Differences still unexplained then are reported as unverified.
	SettleTimeout time.Duration
	// Rounds bounds the re-check rounds of the differences seen in the first pass (default 50;
	// SettleTimeout bounds them too).
	Rounds int
	// Workers compare items in parallel (default 4).
	Workers int
	// ReservationTTL gives a restored reservation its expiry when the record has none (orders
	// recorded before orders.expires_at): created_at + ReservationTTL.
	ReservationTTL time.Duration
	// QuietFor is how long restore watches an item for activity before it calls it idle
	// (default 1s).
	QuietFor time.Duration
	// Ranking, when set, lets restore rebuild ratings and boards.
	Ranking *ranking.Store
	// Pipeline, when set, is how runs wait for the consumer (without it, only the outbox
	// backlog is waited for).
	Pipeline Pipeline
	// Payments, when set, is asked for the state of a payment the record does not account
	// for exactly once.
	Payments PaymentProvider
	// Money, when set, lists the provider's payments for the batch's money check (see
	// checkMoney), and refunds a payment without an order on --repair.
	Money MoneyProvider
	// MoneyWindow is how far back the money check lists payments (DefaultMoneyWindow).
	MoneyWindow time.Duration
	// Retention is how long a final order stays in Redis after it became final
	// (FLASHSALE_ORDER_RETENTION); IdempotencyTTL the window since its creation within which it
	// never leaves (both used as given). Batch expects an order Postgres holds final for longer
	// than both to be absent from Redis.
	Retention, IdempotencyTTL time.Duration
	// PruneMax bounds the orders one pruning pass examines (default DefaultPruneMax).
	PruneMax int
	// Markers, when set, keeps Redis's data markers against the record: a restore of every
	// item that refused none writes fresh ones, which ends a loss (internal/datamark).
	Markers *datamark.Keeper

	// hooks for tests
	afterStart func(ctx context.Context)
	// afterScan, when set, runs after a batch's first pass compared an item (tests kill the
	// primary there).
	afterScan func(ctx context.Context, item string)
	// beforeRepair, when set, runs after a batch confirmed its drift and before it re-emits
	// (tests change an order or stall the runner there).
	beforeRepair func(ctx context.Context)
	// beforeSettle, when set, runs in the first round of each confirmation (a batch's, and its
	// repair's re-check) after the candidates' snapshots, before waiting for their events
	// (tests start a stopped pipeline there).
	beforeSettle func(ctx context.Context)
	// beforeBegin, when set, runs between a restore's checks and its first write (tests sell
	// the item there).
	beforeBegin func(ctx context.Context, item string)
	// afterBegin, when set, runs after restore_begin.lua cleared the item and before its
	// state is written back (tests re-create the item there).
	afterBegin func(ctx context.Context, item string)
	// beforeRatings, when set, runs after the item is back on sale and before its ratings are
	// replayed; afterRating after each recorded rating the replay handled (tests rate there).
	beforeRatings func(ctx context.Context, item string)
	afterRating   func(ctx context.Context, item, user string)
}

// Reconciler compares and repairs one key space against one Postgres record.
type Reconciler struct {
	rdb    redis.UniversalClient
	keys   keyspace.Space
	db     Record
	locker *lock.Locker
	opt    Options
}

// New returns a Reconciler.
func New(rdb redis.UniversalClient, keys keyspace.Space, db Record, opt Options) *Reconciler {
	if opt.LockTTL <= 0 {
		opt.LockTTL = 15 * time.Second
	}
	if opt.SettleTimeout <= 0 {
		opt.SettleTimeout = 30 * time.Second
	}
	if opt.Rounds <= 0 {
		opt.Rounds = 50
	}
	if opt.Workers <= 0 {
		opt.Workers = 4
	}
	if opt.QuietFor <= 0 {
		opt.QuietFor = time.Second
	}
	if opt.PruneMax <= 0 {
		opt.PruneMax = DefaultPruneMax
	}
	return &Reconciler{rdb: rdb, keys: keys, db: db, locker: lock.New(rdb, keys), opt: opt}
}

// Markers is the data markers' keeper (Options.Markers), or nil.
func (r *Reconciler) Markers() *datamark.Keeper { return r.opt.Markers }

// release gives the lock back, riding through a failover that happened during the job: the
// lock was written where the ack set holds it, so the new primary has it to release.
func (r *Reconciler) release(ctx context.Context, lk *lock.Lock) error {
	err := lk.Release(ctx)
	for attempt := 1; redisGone(err) && attempt < failoverAttempts; attempt++ {
		if werr := r.awaitPrimary(ctx); werr != nil {
			return err
		}
		err = lk.Release(ctx)
	}
	return err
}

// withLock runs job under the shared lock, cancelling it if the lock is lost.
func (r *Reconciler) withLock(ctx context.Context, job func(ctx context.Context, fence int64) error) error {
	// The fencing counter lives in Redis; after Redis lost it, start above what Postgres has
	// seen, or every job would be refused as older than the runs before the loss.
	floor, err := r.db.MaxFence(ctx, LockName)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	lk, err := r.locker.ObtainAbove(ctx, LockName, r.opt.LockTTL, floor)
	if errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("%w: %w", ErrBusy, err)
	}
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	jobCtx, stop := lk.Keep(ctx)
	err = job(jobCtx, lk.Fence)
	stop()
	if rerr := r.release(context.WithoutCancel(ctx), lk); rerr != nil && err == nil {
		// The job finished but the lock had expired meanwhile: its fenced writes were
		// accepted or refused on their own merits, so only say it.
		err = fmt.Errorf("reconcile: lock lost before the end of the job: %w", rerr)
	}
	return err
}
