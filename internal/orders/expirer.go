package orders

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/flashsale/flashsale/internal/logging"
)

// Expirer returns the stock of reservations nobody paid, with no request needed: every
// interval it drains each item's due entries in bounded script calls. Any number of expirers
// (one per api instance) may run at once; the expire script makes each order expire once.
type Expirer struct {
	store    *Store
	items    func(ctx context.Context) ([]string, error)
	interval time.Duration
	batch    int

	drained atomic.Int64 // orders this expirer moved to expired
	calls   atomic.Int64 // expire script calls made
}

// NewExpirer returns an Expirer over store. items lists every item id (inventory's IDs);
// interval is the pause between sweeps and batch the most entries one script call takes
// (clamped to 1..MaxExpireBatch).
func NewExpirer(store *Store, items func(ctx context.Context) ([]string, error), interval time.Duration, batch int) *Expirer {
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	batch = min(max(batch, 1), MaxExpireBatch)
	return &Expirer{store: store, items: items, interval: interval, batch: batch}
}

// Drained is how many orders this expirer has expired since it started (for metrics).
func (e *Expirer) Drained() int64 { return e.drained.Load() }

// Calls is how many expire script calls this expirer has made (for metrics).
func (e *Expirer) Calls() int64 { return e.calls.Load() }

// Run sweeps every interval until ctx ends. A failed sweep is logged and retried at the next
// tick: the due entries stay in the index, so nothing is lost.
func (e *Expirer) Run(ctx context.Context) {
	t := time.NewTicker(e.interval)
	defer t.Stop()
	warn := logging.NewThrottle(10 * time.Second) // a Redis outage is one line per 10 s, not four a second
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := e.Sweep(ctx)
		if err != nil && ctx.Err() == nil {
			warn.Warn("expirer: sweep failed", "err", err, "expired", n)
			continue
		}
		if n > 0 {
			slog.Info("expirer: reservations expired", "expired", n, "total", e.Drained())
		}
	}
}

// Sweep drains every item's due reservations once: it finds the items with something due,
// then for each calls the expire script until a call comes back short of a full batch. It
// returns how many orders it expired; on an error it moves on to the next item and reports
// the first error at the end.
func (e *Expirer) Sweep(ctx context.Context) (int64, error) {
	ids, err := e.items(ctx)
	if err != nil {
		return 0, fmt.Errorf("orders: expirer: list items: %w", err)
	}
	if ids, err = e.store.dueItems(ctx, ids); err != nil {
		return 0, fmt.Errorf("orders: expirer: %w", err)
	}
	var total int64
	var first error
	for _, item := range ids {
		for {
			if err := ctx.Err(); err != nil {
				return total, err
			}
			r, err := e.store.ExpireDue(ctx, item, e.batch)
			e.calls.Add(1)
			if err != nil {
				if first == nil {
					first = err
				}
				break
			}
			total += r.Expired
			e.drained.Add(r.Expired)
			if r.Examined < int64(e.batch) {
				break
			}
		}
	}
	return total, first
}
