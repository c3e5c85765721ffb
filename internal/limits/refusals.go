package limits

import (
	"sync"
	"sync/atomic"
	"time"
)

// Refusals remembers, per subject, a refusal the shared limiter in Redis gave and until when
// it holds: GCRA lets a refused subject through no sooner than its retry time, and other
// instances' requests can only push that later, so until then this api answers the subject's
// requests 429 from memory, with the same figures, at no Redis cost. It asks Redis at most
// once per subject and window. Memory is bounded: past max subjects, expired refusals are
// dropped, and while every one is live a new refusal is not remembered (it costs a call).
type Refusals struct {
	max     int
	mu      sync.Mutex
	m       map[string]refusal
	served  atomic.Int64 // requests answered from memory
	dropped atomic.Int64 // refusals not remembered (memory full)
}

type refusal struct {
	until, resetAt time.Time
	limit          int
}

// NewRefusals remembers up to kept subjects at once.
func NewRefusals(kept int) *Refusals {
	return &Refusals{max: kept, m: map[string]refusal{}}
}

// Remember records that subject was refused with d at now.
func (r *Refusals) Remember(subject string, d Decision, now time.Time) {
	if d.Allowed || d.RetryAfter <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[subject]; !ok && len(r.m) >= r.max {
		for s, f := range r.m {
			if !now.Before(f.until) {
				delete(r.m, s)
			}
		}
		if len(r.m) >= r.max {
			r.dropped.Add(1)
			return
		}
	}
	r.m[subject] = refusal{until: now.Add(d.RetryAfter), resetAt: now.Add(d.Reset), limit: d.Limit}
}

// Refused returns the refusal subject still has at now: ok is false when there is none (ask
// Redis).
func (r *Refusals) Refused(subject string, now time.Time) (Decision, bool) {
	r.mu.Lock()
	f, ok := r.m[subject]
	if ok && !now.Before(f.until) {
		delete(r.m, subject)
		ok = false
	}
	r.mu.Unlock()
	if !ok {
		return Decision{}, false
	}
	r.served.Add(1)
	return Decision{Limit: f.limit, RetryAfter: f.until.Sub(now), Reset: max(f.resetAt.Sub(now), f.until.Sub(now))}, true
}

// Forget drops every refusal (the policies changed).
func (r *Refusals) Forget() {
	r.mu.Lock()
	clear(r.m)
	r.mu.Unlock()
}

// Served is the requests answered from memory so far.
func (r *Refusals) Served() int64 { return r.served.Load() }
