// Package batch coalesces concurrent calls per key (an item) into batches, so that one Redis
// script call serves many requests: the purchases of a hot item (internal/inventory), the joins
// of a waiting room (internal/queue).
package batch

import "sync"

// Batcher coalesces concurrent calls per key: while a run for a key is under way, newcomers
// queue; the next run takes up to max of them. A lone call goes out at once, so batching adds
// no latency when the shop is quiet. A further run (up to inFlight at once) starts only once
// half a batch waits: it keeps a hot key's calls moving when a run takes long (a replica's
// acknowledgement, a slow network), but a run is worth its cost (a script call costs Redis
// about as much as several of its purchases) only when it carries many calls, so under a
// steady load the calls wait for the running batch and ride in the next, big one. The
// caller's runs must be correct in either order (each script call is atomic and decides its
// calls on their own).
type Batcher[T any] struct {
	max      int
	inFlight int
	run      func(key string, calls []*T)

	mu     sync.Mutex
	queues map[string]*queue[T]
}

type queue[T any] struct {
	key     string
	pending []*T
	running int // drain goroutines working on it
}

// New returns a Batcher that hands run batches of at most most calls, with at most inFlight
// runs of one key at once (both at least 1).
func New[T any](most, inFlight int, run func(key string, calls []*T)) *Batcher[T] {
	return &Batcher[T]{max: max(most, 1), inFlight: max(inFlight, 1), run: run, queues: map[string]*queue[T]{}}
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
	start := q.running == 0 || q.running < b.inFlight && 2*len(q.pending) >= b.max
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
	for {
		b.mu.Lock()
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
	}
}
