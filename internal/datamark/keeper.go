package datamark

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/keyspace"
)

// Ledger is where the reconciler keeps, durably, the marker of each slot it saw: the
// generation and the reconciler's own count in it (record.Queries, table redis_markers).
type Ledger interface {
	// WithMarker runs f with the recorded marker of key ("" and 0 when none), holding the
	// record's lock on it until f returns, and records what f returns unless its gen is "".
	WithMarker(ctx context.Context, key string, f func(gen string, n int64) (string, int64, error)) error
}

// recordObserver is the reconciler's observer id in the markers: one for every reconciler
// instance, whose checks the record's lock serialises.
const recordObserver = "record"

// Keeper is the reconciler's view of the markers, kept in the Postgres record: a slot whose
// marker is gone, older than recorded, or of a generation no restore recorded has lost its
// data, even when every api that saw it has restarted since. A slot without a recorded marker
// adopts the one Redis has, or a fresh one: a shop that was never used is not a loss.
type Keeper struct {
	rdb    redis.Scripter
	slots  []Slot
	ledger Ledger
	lost   atomic.Pointer[Loss]
}

// NewKeeper keeps the markers of keys' slots through rdb, recorded in ledger.
func NewKeeper(rdb redis.Scripter, keys keyspace.Space, ledger Ledger) *Keeper {
	return &Keeper{rdb: rdb, slots: Slots(keys), ledger: ledger}
}

// Lost is the loss the latest round found (a *Loss), or nil.
func (k *Keeper) Lost() error {
	if l := k.lost.Load(); l != nil {
		return l
	}
	return nil
}

// Check compares every marker with the record once, adopting markers for slots that have
// none recorded; it returns the first loss found (a *Loss), else the first error.
func (k *Keeper) Check(ctx context.Context) error {
	var loss *Loss
	var first error
	checked := 0
	for _, s := range k.slots {
		err := k.ledger.WithMarker(ctx, s.Key, func(gen string, n int64) (string, int64, error) {
			if gen == "" {
				r, err := call(ctx, k.rdb, s.Key, "adopt", newGen())
				switch {
				case err != nil:
					return "", 0, err
				case r.lost != "":
					return "", 0, &Loss{Slot: s.Name, Reason: r.lost}
				}
				return r.gen, r.n, nil
			}
			r, err := call(ctx, k.rdb, s.Key, "check", gen, recordObserver, n, "1")
			switch {
			case err != nil:
				return "", 0, err
			case r.status == "lost":
				return "", 0, &Loss{Slot: s.Name, Reason: r.lost}
			}
			return gen, max(n, r.n), nil
		})
		var l *Loss
		switch {
		case errors.As(err, &l):
			if loss == nil {
				loss = l
			}
		case err != nil:
			if first == nil {
				first = err
			}
		default:
			checked++
		}
	}
	switch {
	case loss != nil:
		if k.lost.Swap(loss) == nil {
			slog.Error("Redis lost its data: run `reconciler restore --all`", "err", loss)
		}
		return loss
	case checked == len(k.slots):
		if k.lost.Swap(nil) != nil {
			slog.Info("Redis data markers agree with the record again")
		}
	}
	return first
}

// Restored writes a fresh marker into every slot and records it: what `reconciler restore
// --all` does once every item is rebuilt, so the loss it cured is no longer reported.
func (k *Keeper) Restored(ctx context.Context) error {
	for _, s := range k.slots {
		err := k.ledger.WithMarker(ctx, s.Key, func(string, int64) (string, int64, error) {
			g := newGen()
			if _, err := call(ctx, k.rdb, s.Key, "restored", g); err != nil {
				return "", 0, err
			}
			return g, 0, nil
		})
		if err != nil {
			return err
		}
	}
	k.lost.Store(nil)
	return nil
}

// Run checks every Interval until ctx ends.
func (k *Keeper) Run(ctx context.Context) {
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		if err := k.Check(ctx); err != nil && !errors.Is(err, ErrLost) && ctx.Err() == nil {
			slog.Warn("data markers: not checked against the record", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
