// Package batch coalesces concurrent calls per key (an item) into batches, so that one Redis
// script call serves many requests: the purchases of a hot item (internal/inventory), the joins
// of a waiting room (internal/queue).
package batch

import (
	"context"
	"sync"
	"time"
)

// Batcher coalesces concurrent calls per key: while a run for a key is under way, newcomers
// queue and the next run takes up to max of them; a lone call goes out at once. A further run
// (up to inFlight) starts only once half a batch waits: a run is worth its cost only when it
// carries many calls. Runs must be correct in either order (each script call is atomic).
type Batcher[T any] struct {
	max      int
	inFlight int
	linger   time.Duration
	run      func(key string, calls []*T)

	mu     sync.Mutex
	queues map[string]*queue[T]
}

type queue[T any] struct {
	key     string
	pending []*T
	running int           // drain goroutines working on it
	wake    chan struct{} // set while a drainer gathers: closed once half a batch waits
}

// New returns a Batcher that hands run batches of at most most calls, with at most inFlight
// runs of one key at once (both at least 1), gathering a hot key's calls for up to linger
// between runs (0: never).
func New[T any](most, inFlight int, linger time.Duration, run func(key string, calls []*T)) *Batcher[T] {
	return &Batcher[T]{max: max(most, 1), inFlight: max(inFlight, 1), linger: max(linger, 0), run: run,
		queues: map[string]*queue[T]{}}
}

// Submit queues c under key; a run will take it.
func (b *Batcher[T]) Submit(key string, c *T) {
	b.mu.Lock()
	q, ok := b.queues[key]
	if !ok {
		q = &queue[T]{key: key}
		b.queues[key] = q
	}
	q.pending = append(q.pending, c)
	half := 2*len(q.pending) >= b.max
	start := q.running == 0
	if half && q.wake != nil { // a drainer gathers: half a batch is what it waits for
		close(q.wake)
		q.wake = nil
	} else if half && q.running < b.inFlight {
		start = true
	}
	if start {
		q.running++
	}
	b.mu.Unlock()
	if start {
		go b.drain(q)
	}
}

// drain runs batches for one key until its queue is empty, then stops (forgetting the queue
// when it was the last one running).
func (b *Batcher[T]) drain(q *queue[T]) {
	hot := false // the last run carried at least an eighth of a batch
	for {
		b.mu.Lock()
		// After a hot run, wait for half a batch or the linger: each call waits at most one
		// linger longer, and a quiet key never waits.
		if hot && b.linger > 0 && q.wake == nil && len(q.pending) > 0 && 2*len(q.pending) < b.max {
			b.gather(q)
		}
		n := len(q.pending)
		if n == 0 {
			if q.running--; q.running == 0 {
				delete(b.queues, q.key)
			}
			b.mu.Unlock()
			return
		}
		n = min(n, b.max)
		batch := q.pending[:n:n]
		q.pending = q.pending[n:]
		b.mu.Unlock()
		b.run(q.key, batch)
		hot = 8*n >= b.max
	}
}

// gather waits, with b.mu held on entry and on return, until half a batch of q waits or the
// linger passes.
func (b *Batcher[T]) gather(q *queue[T]) {
	wake := make(chan struct{})
	q.wake = wake
	b.mu.Unlock()
	t := time.NewTimer(b.linger)
	select {
	case <-wake:
		t.Stop()
	case <-t.C:
	}
	b.mu.Lock()
	if q.wake == wake {
		q.wake = nil
	}
}

// Call is a call a run carries: its caller's context, and how to answer it with an error.
type Call interface {
	Context() context.Context
	Fail(err error)
}

// Live drops the calls whose caller has gone, failing each with its context's error (nobody
// would learn its outcome, so it is never sent), and returns the rest in order, in calls'
// array. Runs call it first.
func Live[C Call](calls []C) []C {
	live := calls[:0]
	for _, c := range calls {
		if err := c.Context().Err(); err != nil {
			c.Fail(err)
			continue
		}
		live = append(live, c)
	}
	return live
}
