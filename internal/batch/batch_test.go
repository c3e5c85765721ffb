package batch

import (
	"sync"
	"testing"
	"time"
)

type call struct{ n int }

// TestInFlight: at most inFlight runs of one key at once; a newcomer goes out at once while
// fewer are running, else waits and rides in the next run with everyone else who queued
// meanwhile; every call runs exactly once. The runs are held open by the test, so what is
// asserted is the schedule, not timing.
func TestInFlight(t *testing.T) {
	type run struct {
		calls   []*call
		release chan struct{}
	}
	started := make(chan run)
	var mu sync.Mutex
	running, most := 0, 0
	seen := map[*call]int{}
	b := New(64, 2, func(key string, calls []*call) {
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
	next := func() run {
		t.Helper()
		select {
		case r := <-started:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no run started")
			return run{}
		}
	}
	c1, c2, c3, c4 := &call{1}, &call{2}, &call{3}, &call{4}
	b.Submit("x", c1)
	r1 := next()
	b.Submit("x", c2) // one call running: the second goes out at once, alone
	r2 := next()
	if len(r1.calls) != 1 || r1.calls[0] != c1 || len(r2.calls) != 1 || r2.calls[0] != c2 {
		t.Fatalf("first runs: %d, %d calls", len(r1.calls), len(r2.calls))
	}
	b.Submit("x", c3) // two running: these wait
	b.Submit("x", c4)
	select {
	case r := <-started:
		t.Fatalf("a third run started with %d calls while two ran", len(r.calls))
	default:
	}
	close(r1.release)
	r3 := next()
	if len(r3.calls) != 2 || r3.calls[0] != c3 || r3.calls[1] != c4 {
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
	for _, c := range []*call{c1, c2, c3, c4} {
		if seen[c] != 1 {
			t.Fatalf("a call ran %d times", seen[c])
		}
	}
}
