package limits

import (
	"hash/maphash"
	"math"
	"sync"
	"time"
)

// Local is a GCRA limiter in this process's memory (the algorithm of lua/lib/gcra.lua) for limits
// each api instance enforces alone: a check is a map lookup under a lock, no Redis call, and n
// instances allow n times the policy. A subject whose bucket is full again is forgotten, so
// memory holds only the subjects seen within a burst's refill time.
type Local struct {
	p      Policy
	t      float64 // emission interval, ns
	tau    float64 // burst tolerance, ns
	seed   maphash.Seed
	shards [localShards]localShard
}

const localShards = 64

type localShard struct {
	mu    sync.Mutex
	tat   map[string]int64 // subject -> theoretical arrival time, unix ns
	sweep int              // size at which the shard next drops full buckets
}

// NewLocal returns a Local for p (Rate 0: everything passes). p must be valid (Burst >= 1,
// Period >= 1 ms) unless off.
func NewLocal(p Policy) (*Local, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	l := &Local{p: p, seed: maphash.MakeSeed()}
	if !p.Off() {
		l.t = float64(p.Period) / float64(p.Rate)
		l.tau = l.t * float64(p.Burst)
	}
	for i := range l.shards {
		l.shards[i].tat = map[string]int64{}
		l.shards[i].sweep = 1024
	}
	return l, nil
}

// Policy is the limiter's policy.
func (l *Local) Policy() Policy { return l.p }

// Allow decides one request of subject at now; a refusal changes nothing.
func (l *Local) Allow(subject string, now time.Time) Decision {
	if l.p.Off() {
		return Decision{Allowed: true}
	}
	sh := &l.shards[maphash.String(l.seed, subject)%localShards]
	n := now.UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	tat, ok := sh.tat[subject]
	if !ok || tat < n {
		tat = n
	}
	newTAT := float64(tat) + l.t
	diff := float64(n) - (newTAT - l.tau)
	if diff < 0 {
		remaining := max(0, int(math.Floor((float64(n)-(float64(tat)-l.tau))/l.t)))
		return Decision{Limit: l.p.Burst, Remaining: remaining,
			RetryAfter: time.Duration(-diff), Reset: time.Duration(tat - n)}
	}
	if len(sh.tat) >= sh.sweep {
		sh.drop(n)
	}
	sh.tat[subject] = int64(newTAT)
	return Decision{Allowed: true, Limit: l.p.Burst, Remaining: int(math.Floor(diff / l.t)),
		Reset: time.Duration(int64(newTAT) - n)}
}

// Subjects is how many subjects the limiter holds (for tests of its memory bound).
func (l *Local) Subjects() int {
	n := 0
	for i := range l.shards {
		l.shards[i].mu.Lock()
		n += len(l.shards[i].tat)
		l.shards[i].mu.Unlock()
	}
	return n
}

// drop forgets the subjects whose bucket is full again (TAT in the past: they read as new),
// and sets the next sweep at twice what is left, so sweeping costs O(1) a request.
func (sh *localShard) drop(now int64) {
	for s, tat := range sh.tat {
		if tat <= now {
			delete(sh.tat, s)
		}
	}
	sh.sweep = max(1024, 2*len(sh.tat))
}
