package orders

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/logging"
)

// Expirer returns the stock of reservations nobody paid, with no request needed: every
// interval it drains each shard's due entries in bounded script calls. Its idle cost is one
// command per shard per interval, whatever the number of items. Any number of expirers (one per
// api instance) may run at once; the expire script makes each order expire once.
type Expirer struct {
	store    *Store
	interval time.Duration
	batch    int

	drained atomic.Int64 // orders this expirer moved to expired
	calls   atomic.Int64 // expire script calls made
}

// NewExpirer returns an Expirer over store; interval is the pause between sweeps and batch the
// most entries one pass over a shard takes (clamped to 1..MaxExpireBatch).
func NewExpirer(store *Store, interval time.Duration, batch int) *Expirer {
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	batch = min(max(batch, 1), MaxExpireBatch)
	return &Expirer{store: store, interval: interval, batch: batch}
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

// Sweep drains every shard's due reservations once, repeating a shard while a pass comes back
// full. It returns how many orders it expired; on an error it moves on to the next shard and
// reports the first error at the end.
func (e *Expirer) Sweep(ctx context.Context) (int64, error) {
	var total int64
	var first error
	for shard := range keyspace.Shards {
		var left int64 // entries this sweep read and left in the shard's index, at its head
		for {
			if err := ctx.Err(); err != nil {
				return total, err
			}
			r, err := e.store.ExpireShardFrom(ctx, shard, left, e.batch)
			e.calls.Add(r.Calls)
			total += r.Expired
			e.drained.Add(r.Expired)
			if err != nil {
				if first == nil {
					first = err
				}
				break
			}
			left += r.Read - r.Examined
			if r.Read < int64(e.batch) {
				break
			}
		}
	}
	return total, first
}
