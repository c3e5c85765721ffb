package queue

import "sync"

// batcher coalesces concurrent calls per item, as the inventory's purchase batcher does: while
// one script call for an item is in flight, newcomers queue; the next call takes up to max of
// them. A lone call goes out at once, so batching adds no latency when the shop is quiet.
type batcher[T any] struct {
	max int
	run func(item string, calls []*T)

	mu     sync.Mutex
	queues map[string]*pending[T]
}

type pending[T any] struct {
	item  string
	calls []*T
}

func newBatcher[T any](most int, run func(string, []*T)) *batcher[T] {
	return &batcher[T]{max: most, run: run, queues: map[string]*pending[T]{}}
}

func (b *batcher[T]) submit(item string, c *T) {
	b.mu.Lock()
	q, running := b.queues[item]
	if !running {
		q = &pending[T]{item: item}
		b.queues[item] = q
	}
	q.calls = append(q.calls, c)
	b.mu.Unlock()
	if !running {
		go b.drain(q)
	}
}

// drain runs batches for one item until its queue is empty, then forgets the queue.
func (b *batcher[T]) drain(q *pending[T]) {
	for {
		b.mu.Lock()
		n := len(q.calls)
		if n == 0 {
			delete(b.queues, q.item)
			b.mu.Unlock()
			return
		}
		n = min(n, b.max)
		batch := q.calls[:n:n]
		q.calls = q.calls[n:]
		b.mu.Unlock()
		b.run(q.item, batch)
	}
}
