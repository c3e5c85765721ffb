package datamark

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/keyspace"
)

// Interval is how often the api and the reconciler look at the markers: a loss is noticed
// within two of them.
const Interval = 2 * time.Second

// mark is what an observer saw of one marker: its generation and the observer's own count,
// as the replicas acknowledged them.
type mark struct {
	gen string
	n   int64
}

// Watch is an api's view of the markers: it remembers the marker of each slot and its own
// count there, and reports a loss when a marker is gone or its count moved back. Another generation is a restore's
// (only restores write one where a marker was), so it is followed.
type Watch struct {
	rdb   redis.Scripter
	id    string // this observer's field in the markers
	slots []Slot
	mu    sync.Mutex // one round at a time
	seen  []mark
	lost  atomic.Pointer[Loss]
}

// NewWatch watches the markers of keys' slots through rdb.
func NewWatch(rdb redis.Scripter, keys keyspace.Space) *Watch {
	s := Slots(keys)
	return &Watch{rdb: rdb, id: newGen()[:16], slots: s, seen: make([]mark, len(s))}
}

// Lost is the loss the latest round found (a *Loss), or nil.
func (w *Watch) Lost() error {
	if l := w.lost.Load(); l != nil {
		return l
	}
	return nil
}

// Check looks at every marker once. A slot Redis did not answer for keeps the state it had
// (Redis being down is /readyz's other check); the error is the first such.
func (w *Watch) Check(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first error
	var loss *Loss
	answered := 0
	for i, s := range w.slots {
		r, err := call(ctx, w.rdb, s.Key, "check", w.seen[i].gen, w.id, w.seen[i].n, "0")
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		answered++
		switch r.status {
		case "ok":
			w.seen[i] = mark{gen: r.gen, n: r.n}
		case "lost":
			if loss == nil {
				loss = &Loss{Slot: s.Name, Reason: r.lost}
			}
		}
	}
	switch {
	case loss != nil:
		if w.lost.Swap(loss) == nil {
			slog.Error("Redis lost its data: changes are refused until `reconciler restore --all` has run", "err", loss)
		}
	case answered == len(w.slots):
		if w.lost.Swap(nil) != nil {
			slog.Info("Redis data markers agree again (restored): changes are accepted")
		}
	}
	return first
}

// Run checks every Interval until ctx ends.
func (w *Watch) Run(ctx context.Context) {
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		if err := w.Check(ctx); err != nil && ctx.Err() == nil {
			slog.Debug("data markers: not checked", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
