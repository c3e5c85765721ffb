package batch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

type call struct{ n int }

// run is one run the tests hold open: its calls, and the channel that lets it return.
type run struct {
	calls   []*call
	release chan struct{}
}

// nextRun is the next run to start, failing the test if none starts within 10 seconds.
func nextRun(t *testing.T, started chan run) run {
	t.Helper()
	select {
	case r := <-started:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no run started")
		return run{}
	}
}

// TestInFlight: a lone call goes out at once; while a run is under way newcomers queue, and a
// second run (at most inFlight at once) starts only once half a batch waits; the rest ride in
// the next run with everyone else who queued meanwhile; every call runs exactly once. The runs
// are held open by the test, so what is asserted is the schedule, not timing.
func TestInFlight(t *testing.T) {
	started := make(chan run)
	var mu sync.Mutex
	running, most := 0, 0
	seen := map[*call]int{}
	b := New(4, 2, 0, func(key string, calls []*call) {
		mu.Lock()
		running++
		most = max(most, running)
		for _, c := range calls {
			seen[c]++
		}
		mu.Unlock()
		r := run{calls: calls, release: make(chan struct{})}
		started <- r
		<-r.release
		mu.Lock()
		running--
		mu.Unlock()
	})
	next := func() run { t.Helper(); return nextRun(t, started) }
	// runs is how many runs of x Submit has started (it counts them before it returns).
	runs := func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.queues["x"].running
	}
	calls := []*call{{1}, {2}, {3}, {4}, {5}, {6}}
	b.Submit("x", calls[0])
	r1 := next()
	b.Submit("x", calls[1]) // one running, one waiting: less than half a batch of 4
	if n := runs(); n != 1 {
		t.Fatalf("%d runs with one call waiting, want 1", n)
	}
	b.Submit("x", calls[2]) // half a batch waits: a second run takes it
	r2 := next()
	if len(r1.calls) != 1 || r1.calls[0] != calls[0] || len(r2.calls) != 2 || r2.calls[0] != calls[1] || r2.calls[1] != calls[2] {
		t.Fatalf("first runs: %d, %d calls", len(r1.calls), len(r2.calls))
	}
	for _, c := range calls[3:] { // two running: these wait, however many
		b.Submit("x", c)
	}
	if n := runs(); n != 2 {
		t.Fatalf("%d runs with inFlight 2", n)
	}
	close(r1.release)
	r3 := next()
	if len(r3.calls) != 3 || r3.calls[0] != calls[3] || r3.calls[2] != calls[5] {
		t.Fatalf("the queued calls went out as %d", len(r3.calls))
	}
	close(r2.release)
	close(r3.release)
	// Both drainers stop once the queue is empty, and the item's queue is forgotten.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		n := len(b.queues)
		b.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the item's queue was not forgotten")
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if most != 2 {
		t.Fatalf("%d calls ran at once, want 2", most)
	}
	for _, c := range calls {
		if seen[c] != 1 {
			t.Fatalf("call %d ran %d times", c.n, seen[c])
		}
	}
}

// TestLinger: after a small run waiting calls go at once; after a hot run (an eighth of a batch
// or more) they wait until half a batch waits or the linger passes. Every call runs once. The
// test holds the runs open and reads the Batcher's state: it asserts the schedule, not timing.
func TestLinger(t *testing.T) {
	newBatcher := func(linger time.Duration) (*Batcher[call], chan run) {
		started := make(chan run)
		return New(16, 1, linger, func(key string, calls []*call) {
			r := run{calls: calls, release: make(chan struct{})}
			started <- r
			<-r.release
		}), started
	}
	next := func(started chan run) run { t.Helper(); return nextRun(t, started) }
	gathering := func(b *Batcher[call]) bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		q := b.queues["x"]
		return q != nil && q.wake != nil
	}
	waitGathering := func(b *Batcher[call]) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !gathering(b) {
			if time.Now().After(deadline) {
				t.Fatal("the drainer did not gather after a hot run")
			}
			time.Sleep(time.Millisecond)
		}
	}
	calls := make([]*call, 12)
	for i := range calls {
		calls[i] = &call{i}
	}
	b, started := newBatcher(time.Hour) // only half a batch ends the gathering
	b.Submit("x", calls[0])
	r1 := next(started)
	b.Submit("x", calls[1])
	b.Submit("x", calls[2])
	close(r1.release) // one call: not hot, so the two waiting go at once
	r2 := next(started)
	if len(r2.calls) != 2 {
		t.Fatalf("after a small run %d calls went, want the 2 waiting", len(r2.calls))
	}
	b.Submit("x", calls[3])
	close(r2.release) // two calls, an eighth of 16: hot, and one waits
	waitGathering(b)
	for _, c := range calls[4:10] { // 7 wait: less than half a batch
		b.Submit("x", c)
	}
	select {
	case r := <-started:
		t.Fatalf("a run of %d calls started with less than half a batch waiting", len(r.calls))
	default:
	}
	if !gathering(b) {
		t.Fatal("the gathering ended with less than half a batch waiting")
	}
	b.Submit("x", calls[10]) // the eighth: half a batch
	r3 := next(started)
	if len(r3.calls) != 8 || r3.calls[0] != calls[3] || r3.calls[7] != calls[10] {
		t.Fatalf("the gathered run carried %d calls, want calls 3..10", len(r3.calls))
	}
	close(r3.release)

	short, startedShort := newBatcher(time.Millisecond) // the linger passes first
	short.Submit("x", calls[0])
	s1 := next(startedShort)
	short.Submit("x", calls[1])
	short.Submit("x", calls[2])
	close(s1.release)
	s2 := next(startedShort)
	short.Submit("x", calls[11])
	close(s2.release) // hot; one waits, and nobody else comes
	s3 := next(startedShort)
	if len(s3.calls) != 1 || s3.calls[0] != calls[11] {
		t.Fatalf("after the linger %d calls went, want the one waiting", len(s3.calls))
	}
	close(s3.release)
}

type ctxCall struct {
	ctx    context.Context
	failed error
}

func (c *ctxCall) Context() context.Context { return c.ctx }
func (c *ctxCall) Fail(err error)           { c.failed = err }

// TestLive: a call whose context has ended is failed with its error and left out; the others
// stay, in order.
func TestLive(t *testing.T) {
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	a, b, c := &ctxCall{ctx: context.Background()}, &ctxCall{ctx: gone}, &ctxCall{ctx: context.Background()}
	live := Live([]*ctxCall{a, b, c})
	if len(live) != 2 || live[0] != a || live[1] != c {
		t.Fatalf("live = %v, want [a c]", live)
	}
	if !errors.Is(b.failed, context.Canceled) || a.failed != nil || c.failed != nil {
		t.Fatalf("failed: a %v, b %v, c %v; want only b, canceled", a.failed, b.failed, c.failed)
	}
}
