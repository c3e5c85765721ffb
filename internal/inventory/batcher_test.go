package inventory

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestBatcherInFlight: at most inFlight script calls of one item run at once; a newcomer goes
// out at once while fewer are running, else waits and rides in the next call with everyone
// else who queued meanwhile; every call runs exactly once. The runs are held open by the test,
// so what is asserted is the schedule, not timing.
func TestBatcherInFlight(t *testing.T) {
	type run struct {
		calls   []*purchaseCall
		release chan struct{}
	}
	started := make(chan run)
	var mu sync.Mutex
	running, most := 0, 0
	seen := map[*purchaseCall]int{}
	b := newBatcher(64, 2, func(item string, calls []*purchaseCall) {
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
	call := func() *purchaseCall {
		return &purchaseCall{ctx: context.Background(), req: PurchaseRequest{ItemID: "x"}, done: make(chan purchaseReply, 1)}
	}
	next := func() run {
		t.Helper()
		select {
		case r := <-started:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no script call started")
			return run{}
		}
	}
	c1, c2, c3, c4 := call(), call(), call(), call()
	b.submit(c1)
	r1 := next()
	b.submit(c2) // one call running: the second goes out at once, alone
	r2 := next()
	if len(r1.calls) != 1 || r1.calls[0] != c1 || len(r2.calls) != 1 || r2.calls[0] != c2 {
		t.Fatalf("first calls: %d, %d purchases", len(r1.calls), len(r2.calls))
	}
	b.submit(c3) // two running: these wait
	b.submit(c4)
	select {
	case r := <-started:
		t.Fatalf("a third call started with %d purchases while two ran", len(r.calls))
	default:
	}
	close(r1.release)
	r3 := next()
	if len(r3.calls) != 2 || r3.calls[0] != c3 || r3.calls[1] != c4 {
		t.Fatalf("the queued purchases went out as %d", len(r3.calls))
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
	for _, c := range []*purchaseCall{c1, c2, c3, c4} {
		if seen[c] != 1 {
			t.Fatalf("a purchase ran %d times", seen[c])
		}
	}
}
