package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// RunEvery runs a batch (without repair) every interval until ctx ends; interval 0 does
// nothing. Every reconciler instance may run it: the lock lets one batch run at a time, and
// an instance that finds it held just waits for its next turn.
func (r *Reconciler) RunEvery(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		rep, err := r.Batch(ctx, BatchOptions{})
		switch {
		case errors.Is(err, ErrBusy):
			slog.Info("scheduled reconciliation skipped", "reason", err)
		case err != nil:
			if ctx.Err() == nil {
				slog.Error("scheduled reconciliation failed", "err", err)
			}
		case !rep.Clean():
			slog.Warn("scheduled reconciliation found drift", "run", rep.RunID, "drift", len(rep.Drift), "unverified", len(rep.Unverified))
		default:
			slog.Info("scheduled reconciliation clean", "run", rep.RunID, "orders", rep.Orders, "ms", rep.DurationMs)
		}
	})
}

// every calls run every interval until ctx ends; interval 0 (or less) calls it never.
func every(ctx context.Context, interval time.Duration, run func()) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		run()
	}
}
