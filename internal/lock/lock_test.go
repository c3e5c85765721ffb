package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/lock"
	"github.com/flashsale/flashsale/internal/testing/testenv"
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

// TestObtainAboveFloor: the fencing counter lives in Redis and is lost with it (a flush, a
// restart without persistence), while the holders' writes remember their numbers elsewhere.
// A floor from there keeps every new number above the old ones; a counter already above the
// floor simply grows; a refused caller moves nothing.
func TestObtainAboveFloor(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	l := lock.New(rdb, keys)
	ctx := context.Background()
	_, fenceKey := keys.Lock("job")

	obtain := func(floor int64) *lock.Lock {
		t.Helper()
		lk, err := l.ObtainAbove(ctx, "job", 10*time.Second, floor)
		if err != nil {
			t.Fatalf("obtain above %d: %v", floor, err)
		}
		return lk
	}
	for _, c := range []struct {
		name  string
		floor int64
		want  int64
	}{
		{"a fresh counter starts above the floor", 41, 42},
		{"a counter above the floor grows by one", 10, 43},
		{"no floor", 0, 44},
		{"a floor equal to the counter", 44, 45},
		{"a floor far above the counter", 1_000_000, 1_000_001},
	} {
		lk := obtain(c.floor)
		if lk.Fence != c.want {
			t.Fatalf("%s: fence %d, want %d", c.name, lk.Fence, c.want)
		}
		if got, _ := rdb.Get(ctx, fenceKey).Int64(); got != c.want {
			t.Fatalf("%s: counter %d after obtain, want %d (the next holder must start above)", c.name, got, c.want)
		}
		// A caller refused while the lock is held consumes no number, whatever its floor.
		if _, err := l.ObtainAbove(ctx, "job", time.Second, c.want+100); !errors.Is(err, lock.ErrHeld) {
			t.Fatalf("%s: obtain while held: %v; want ErrHeld", c.name, err)
		}
		if got, _ := rdb.Get(ctx, fenceKey).Int64(); got != c.want {
			t.Fatalf("%s: a refused caller moved the counter to %d", c.name, got)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Redis loses the counter; the floor (the largest number recorded elsewhere) carries on.
	rdb.Del(ctx, fenceKey)
	if lk := obtain(1_000_001); lk.Fence != 1_000_002 {
		t.Fatalf("after the counter was lost: fence %d, want 1000002", lk.Fence)
	}
	if _, err := l.ObtainAbove(ctx, "other", time.Second, -1); err == nil {
		t.Fatal("a negative floor was accepted")
	}
}
