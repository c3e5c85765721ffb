// Package lock owns cluster-wide job locks in Redis (batch reconciliation, restore): SET NX PX
// with a value per holder, taken with a fencing number that only grows, refreshed while the job
// runs and released only by its owner. A holder stalled past its TTL loses the lock unaware, so
// writes that matter carry the fencing number and their store refuses an older one.
package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/keyspace"
)

// Sentinel errors.
var (
	// ErrHeld means another holder has the lock (the error is a *HeldError saying who).
	ErrHeld = errors.New("lock: held by another runner")
	// ErrNotHeld means the lock had expired: nobody holds it now.
	ErrNotHeld = errors.New("lock: not held (it expired)")
	// ErrTaken means the lock expired and another holder took it.
	ErrTaken = errors.New("lock: taken over by another holder")
)

// HeldError is returned by Obtain when another holder has the lock.
type HeldError struct {
	Name   string
	Holder string        // the holder's value: "<host>/<pid>/<random>"
	TTL    time.Duration // how long the holder keeps it without a refresh
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("lock %q is held by %s for another %s", e.Name, e.Holder, e.TTL.Round(time.Millisecond))
}

func (e *HeldError) Unwrap() error { return ErrHeld }

// Locker obtains locks under one key space.
type Locker struct {
	rdb  redis.UniversalClient
	keys keyspace.Space
}

// New returns a Locker.
func New(rdb redis.UniversalClient, keys keyspace.Space) *Locker {
	return &Locker{rdb: rdb, keys: keys}
}

// Lock is one holding of a named lock.
type Lock struct {
	locker *Locker
	name   string
	key    string
	value  string
	ttl    time.Duration
	// Fence is this holding's fencing number: larger than every earlier holding's.
	Fence int64
}

// Obtain takes the named lock for ttl (whole milliseconds, at least 1ms), or returns a
// *HeldError (errors.Is ErrHeld) when another holder has it.
func (l *Locker) Obtain(ctx context.Context, name string, ttl time.Duration) (*Lock, error) {
	return l.ObtainAbove(ctx, name, ttl, 0)
}

// ObtainAbove is Obtain with a fencing number above floor: the largest number the holders'
// fenced writes have recorded elsewhere (Postgres), so a counter Redis lost restarts above it.
func (l *Locker) ObtainAbove(ctx context.Context, name string, ttl time.Duration, floor int64) (*Lock, error) {
	if floor < 0 {
		return nil, fmt.Errorf("lock: obtain %q: negative floor %d", name, floor)
	}
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("lock: obtain %q: ttl %s is below 1ms", name, ttl)
	}
	key, fence := l.keys.Lock(name)
	value := ownerValue()
	reply, err := obtainScript.Run(ctx, l.rdb, []string{key, fence}, value, ttl.Milliseconds(), floor).Slice()
	if err != nil {
		return nil, fmt.Errorf("lock: obtain %q: %w", name, err)
	}
	if len(reply) != 3 {
		return nil, fmt.Errorf("lock: obtain %q: unexpected reply %v", name, reply)
	}
	switch reply[0] {
	case "obtained":
		n, ok := reply[1].(int64)
		if !ok {
			return nil, fmt.Errorf("lock: obtain %q: unexpected reply %v", name, reply)
		}
		return &Lock{locker: l, name: name, key: key, value: value, ttl: ttl, Fence: n}, nil
	case "held":
		holder, _ := reply[1].(string)
		ms, _ := reply[2].(int64)
		return nil, &HeldError{Name: name, Holder: holder, TTL: time.Duration(ms) * time.Millisecond}
	}
	return nil, fmt.Errorf("lock: obtain %q: unexpected reply %v", name, reply)
}

// ownerValue is random per holding (so nobody else's release matches it) and names the
// process, so a refused runner can say who has the lock.
func ownerValue() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}

// Name is the lock's name.
func (lk *Lock) Name() string { return lk.name }

// Owner is this holding's lock value.
func (lk *Lock) Owner() string { return lk.value }

// Refresh extends the lock to a full TTL from now. ErrNotHeld: it expired; ErrTaken: it
// expired and another holder has it. Either way this holding is over.
func (lk *Lock) Refresh(ctx context.Context) error {
	reply, err := refreshScript.Run(ctx, lk.locker.rdb, []string{lk.key}, lk.value, lk.ttl.Milliseconds()).Text()
	if err != nil {
		return fmt.Errorf("lock: refresh %q: %w", lk.name, err)
	}
	return lk.outcome("refresh", "refreshed", reply)
}

// Release gives the lock back. ErrNotHeld: it had already expired (nothing was deleted);
// ErrTaken: another holder has it now (nothing was deleted).
func (lk *Lock) Release(ctx context.Context) error {
	reply, err := releaseScript.Run(ctx, lk.locker.rdb, []string{lk.key}, lk.value).Text()
	if err != nil {
		return fmt.Errorf("lock: release %q: %w", lk.name, err)
	}
	return lk.outcome("release", "released", reply)
}

func (lk *Lock) outcome(op, ok, reply string) error {
	switch reply {
	case ok:
		return nil
	case "not_held":
		return fmt.Errorf("lock: %s %q: %w", op, lk.name, ErrNotHeld)
	case "other":
		return fmt.Errorf("lock: %s %q: %w", op, lk.name, ErrTaken)
	}
	return fmt.Errorf("lock: %s %q: unexpected reply %q", op, lk.name, reply)
}

// Keep refreshes the lock every third of its TTL until stop is called or the returned
// context ends. The returned context is cancelled, with the reason as its cause, as soon as
// the lock is lost or cannot be confirmed before its TTL runs out (Redis unreachable), so the
// job stops instead of running unprotected. stop waits for the refresh loop to end.
func (lk *Lock) Keep(ctx context.Context) (context.Context, func()) {
	jobCtx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		every := lk.ttl / 3
		// Valid until: the last moment the lock is known to be ours (measured before the
		// request, so a slow reply never extends it).
		validUntil := time.Now().Add(lk.ttl)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-jobCtx.Done():
				return
			case <-t.C:
			}
			sent := time.Now()
			rctx, rcancel := context.WithDeadline(jobCtx, validUntil)
			err := lk.Refresh(rctx)
			rcancel()
			switch {
			case err == nil:
				validUntil = sent.Add(lk.ttl)
			case errors.Is(err, ErrNotHeld), errors.Is(err, ErrTaken):
				cancel(err)
				return
			case time.Now().After(validUntil):
				cancel(fmt.Errorf("lock: %q could not be refreshed before its ttl: %w", lk.name, err))
				return
			}
		}
	}()
	return jobCtx, func() {
		cancel(context.Canceled)
		<-done
	}
}
