package limits

import (
	"sync"
	"sync/atomic"
	"time"
)

// Refusals remembers, per subject, a refusal the shared limiter gave and until when it holds
// (GCRA lets it through no sooner, whatever other instances do), so this api answers the
// subject 429 from memory until then. Bounded: past max subjects, expired refusals go, and a
// new one is not remembered while every one is live.
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
