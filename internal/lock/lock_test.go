package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/lock"
	"github.com/flashsale/flashsale/internal/testenv"
)

// Many runners race for the lock: exactly one gets it, every other is told who has it, and
// fencing numbers only grow across holdings.
func TestOneHolderAmongRacers(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	l := lock.New(rdb, keys)
	ctx := context.Background()

	var lastFence int64
	for round := 0; round < 5; round++ {
		const racers = 32
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []*lock.Lock
			refused []*lock.HeldError
		)
		start := make(chan struct{})
		for i := 0; i < racers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				lk, err := l.Obtain(ctx, "batch", 10*time.Second)
				mu.Lock()
				defer mu.Unlock()
				var held *lock.HeldError
				switch {
				case err == nil:
					winners = append(winners, lk)
				case errors.As(err, &held) && errors.Is(err, lock.ErrHeld):
					refused = append(refused, held)
				default:
					t.Errorf("obtain: %v", err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 || len(refused) != racers-1 {
			t.Fatalf("round %d: %d winners, %d refused; want 1 and %d", round, len(winners), len(refused), racers-1)
		}
		w := winners[0]
		for _, h := range refused {
			if h.Holder != w.Owner() || h.TTL <= 0 || h.TTL > 10*time.Second {
				t.Fatalf("refusal names %q ttl %s; want holder %q", h.Holder, h.TTL, w.Owner())
			}
		}
		if w.Fence <= lastFence {
			t.Fatalf("fence %d after %d: must grow", w.Fence, lastFence)
		}
		lastFence = w.Fence
		if err := w.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		if err := w.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("second release: %v; want ErrNotHeld", err)
		}
	}
}

// A holder that outlives its TTL is told the truth: not held (expired, free) versus taken
// (another holder has it), and it can neither release nor refresh the new holder's lock.
func TestExpiredHolder(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	l := lock.New(rdb, keys)
	ctx := context.Background()

	old, err := l.Obtain(ctx, "restore", 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := keys.Lock("restore")
	waitGone(t, func() bool { return rdb.Exists(ctx, key).Val() == 0 })
	if err := old.Refresh(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("refresh after expiry: %v; want ErrNotHeld", err)
	}

	next, err := l.Obtain(ctx, "restore", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if next.Fence <= old.Fence {
		t.Fatalf("fence %d after %d", next.Fence, old.Fence)
	}
	if err := old.Release(ctx); !errors.Is(err, lock.ErrTaken) {
		t.Fatalf("stale release: %v; want ErrTaken", err)
	}
	if err := old.Refresh(ctx); !errors.Is(err, lock.ErrTaken) {
		t.Fatalf("stale refresh: %v; want ErrTaken", err)
	}
	if v := rdb.Get(ctx, key).Val(); v != next.Owner() {
		t.Fatalf("lock value %q after stale calls; want the new holder's", v)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Keep holds a short lock far past its TTL, and cancels the job as soon as it is taken.
func TestKeep(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	l := lock.New(rdb, keys)
	ctx := context.Background()

	lk, err := l.Obtain(ctx, "batch", 90*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	job, stop := lk.Keep(ctx)
	time.Sleep(400 * time.Millisecond) // four TTLs
	if job.Err() != nil {
		t.Fatalf("job cancelled while kept: %v", context.Cause(job))
	}
	if _, err := l.Obtain(ctx, "batch", time.Second); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("obtain while kept: %v; want ErrHeld", err)
	}
	// Someone else's value replaces ours (as if ours expired and was taken).
	key, _ := keys.Lock("batch")
	rdb.Set(ctx, key, "intruder", time.Minute)
	select {
	case <-job.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("job not cancelled after the lock was taken")
	}
	if !errors.Is(context.Cause(job), lock.ErrTaken) {
		t.Fatalf("cause %v; want ErrTaken", context.Cause(job))
	}
	stop()
	if rdb.Get(ctx, key).Val() != "intruder" {
		t.Fatal("the loop touched another holder's lock")
	}
}

func TestBadTTL(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	if _, err := lock.New(rdb, keys).Obtain(context.Background(), "x", time.Microsecond); err == nil {
		t.Fatal("sub-millisecond ttl accepted")
	}
}

func waitGone(t *testing.T, gone func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !gone() {
		if time.Now().After(deadline) {
			t.Fatal("lock did not expire")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
