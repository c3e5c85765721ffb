package reconcile

import (
	"context"
	"time"

	"github.com/flashsale/flashsale/internal/record"
)

// SetAfterStart makes Batch call f after it recorded the run's start (tests stall a runner).
func SetAfterStart(o *Options, f func(ctx context.Context)) { o.afterStart = f }

// SetAfterScan makes a batch's first pass call f after it compared each item.
func SetAfterScan(o *Options, f func(ctx context.Context, item string)) { o.afterScan = f }

// SetBeforeRepair makes Batch call f after it confirmed its drift, before it re-emits.
func SetBeforeRepair(o *Options, f func(ctx context.Context)) { o.beforeRepair = f }

// SetBeforeBegin makes Restore call f between an item's idle check and its first write.
func SetBeforeBegin(o *Options, f func(ctx context.Context, item string)) { o.beforeBegin = f }

// SetAfterBegin makes Restore call f after an item's restore_begin.lua, before its writes.
func SetAfterBegin(o *Options, f func(ctx context.Context, item string)) { o.afterBegin = f }

// SetBeforeRatings makes Restore call f after an item is back on sale, before its ratings are
// replayed.
func SetBeforeRatings(o *Options, f func(ctx context.Context, item string)) { o.beforeRatings = f }

// SetAfterRating makes Restore call f after each recorded rating of an item it replayed.
func SetAfterRating(o *Options, f func(ctx context.Context, item, user string)) { o.afterRating = f }

// SetBeforeSettle makes a batch's first confirmation round call f after its snapshots, before
// it waits for their events.
func SetBeforeSettle(o *Options, f func(ctx context.Context)) { o.beforeSettle = f }

// PrunePass runs one pruning pass with fencing number n without taking the lock (tests run two
// at once, as a pruner that stalled past its lock would).
func PrunePass(ctx context.Context, r *Reconciler, n int64) (PruneResult, error) {
	var res PruneResult
	err := r.prunePass(ctx, n, time.Now(), &res)
	return res, err
}

// PruneChunk runs prune.lua on orders of one item with fencing number n: one outcome per order,
// nil when the item is being restored.
func PruneChunk(ctx context.Context, r *Reconciler, n int64, item string, orders []record.PrunableOrder) ([]string, error) {
	return r.pruneChunk(ctx, n, item, orders)
}

// CheckMoney runs the batch's money check alone.
func (r *Reconciler) CheckMoney(ctx context.Context, repair bool) (*MoneyCheck, error) {
	return r.checkMoney(ctx, repair)
}
