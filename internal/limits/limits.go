// Package limits owns rate limiting: GCRA policies evaluated in Redis (lua/lib/gcra.lua) and the
// decisions handed to the HTTP layer for the RateLimit-* headers.
package limits

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/keyspace"
)

// ErrRateLimited means a policy refused the request; the Decision says when to retry.
var ErrRateLimited = errors.New("rate limited")

// ErrBadPolicy means a policy's figures cannot describe a limit.
var ErrBadPolicy = errors.New("bad rate-limit policy")

// Decision is one limiter verdict, as the script reported it.
type Decision struct {
	Allowed    bool
	Limit      int           // the policy's burst: most requests allowed at once
	Remaining  int           // requests still allowed right now
	RetryAfter time.Duration // wait before the next request can pass (0 when allowed)
	Reset      time.Duration // until the limiter is back to full burst
}

// ParseReply builds a Decision from the script's string fields (allowed, remaining,
// retry_after_ms, reset_ms). ok is false when the limiter did not run (empty fields).
func ParseReply(limit int, allowed, remaining, retryMS, resetMS string) (Decision, bool) {
	if allowed == "" {
		return Decision{}, false
	}
	rem, _ := strconv.Atoi(remaining)
	retry, _ := strconv.ParseFloat(retryMS, 64)
	reset, _ := strconv.ParseFloat(resetMS, 64)
	return NewDecision(limit, allowed == "1", rem, retry, reset), true
}

// NewDecision is a Decision from the limiter's figures in milliseconds, as a script computed
// them (gcra.lua's gcra_step).
func NewDecision(limit int, allowed bool, remaining int, retryMS, resetMS float64) Decision {
	return Decision{
		Allowed:    allowed,
		Limit:      limit,
		Remaining:  remaining,
		RetryAfter: time.Duration(retryMS * float64(time.Millisecond)),
		Reset:      time.Duration(resetMS * float64(time.Millisecond)),
	}
}

// Policy is one named limit: Rate requests per Period, with bursts of up to Burst at once.
// Over any window of length E a subject gets at most Burst + Rate*E/Period requests.
// Rate 0 turns the policy off.
type Policy struct {
	Rate   int
	Period time.Duration
	Burst  int
}

func (p Policy) String() string { return fmt.Sprintf("%d/%s burst %d", p.Rate, p.Period, p.Burst) }

// Off reports whether the policy lets everything through.
func (p Policy) Off() bool { return p.Rate == 0 }

func (p Policy) validate() error {
	if p.Off() {
		return nil
	}
	if p.Rate < 0 || p.Period < time.Millisecond || p.Burst < 1 {
		return fmt.Errorf("%w: %d per %s, burst %d", ErrBadPolicy, p.Rate, p.Period, p.Burst)
	}
	return nil
}

// Limiter evaluates named GCRA policies in Redis, so every api instance shares one budget per
// subject; policies can be replaced while it serves. It fails closed (Allow errs, the caller
// refuses), and a refused subject is answered from memory until it may try again (Refusals).
type Limiter struct {
	rdb      redis.UniversalClient
	keys     keyspace.Space
	policies atomic.Pointer[map[string]Policy]
	refusals *Refusals
}

// RefusalsKept bounds the refused subjects a Limiter remembers at once.
const RefusalsKept = 100_000

// NewLimiter returns a Limiter over rdb with the given policies (see SetPolicies).
func NewLimiter(rdb redis.UniversalClient, keys keyspace.Space, policies map[string]Policy) (*Limiter, error) {
	l := &Limiter{rdb: rdb, keys: keys, refusals: NewRefusals(RefusalsKept)}
	if err := l.SetPolicies(policies); err != nil {
		return nil, err
	}
	return l, nil
}

// SetPolicies replaces every policy at once (a config reload). A policy not named is off.
// Subjects keep their state across a reload: the stored arrival time is reinterpreted under
// the new rate and burst.
func (l *Limiter) SetPolicies(policies map[string]Policy) error {
	next := make(map[string]Policy, len(policies))
	for name, p := range policies {
		if err := p.validate(); err != nil {
			return fmt.Errorf("limits: policy %q: %w", name, err)
		}
		next[name] = p
	}
	l.policies.Store(&next)
	if l.refusals != nil {
		l.refusals.Forget()
	}
	return nil
}

// FromMemory is the requests answered with a remembered refusal, no Redis call.
func (l *Limiter) FromMemory() int64 { return l.refusals.Served() }

// Policy returns the named policy; ok is false when it is unknown or off.
func (l *Limiter) Policy(name string) (p Policy, ok bool) {
	p = (*l.policies.Load())[name]
	return p, !p.Off()
}

// Allow takes one request of subject under the named policy. A refusal is a Decision with
// Allowed false and a nil error. An unknown or off policy allows everything (Limit 0, and the
// caller sets no headers). An error means Redis did not decide: fail closed.
func (l *Limiter) Allow(ctx context.Context, policy, subject string) (Decision, error) {
	return l.AllowN(ctx, policy, subject, 1)
}

// AllowN is Allow for a request that costs n cells (1 <= n <= the policy's burst).
func (l *Limiter) AllowN(ctx context.Context, policy, subject string, n int) (Decision, error) {
	p, ok := l.Policy(policy)
	if !ok {
		return Decision{Allowed: true}, nil
	}
	if n < 1 || n > p.Burst {
		return Decision{}, fmt.Errorf("limits: %s: cost %d outside 1..%d: %w", policy, n, p.Burst, ErrBadPolicy)
	}
	key := l.keys.RateLimit(policy, subject)
	if d, refused := l.refusals.Refused(key, time.Now()); refused {
		return d, nil
	}
	res, err := script.Run(ctx, l.rdb, []string{key},
		p.Rate, p.Period.Milliseconds(), p.Burst, n).StringSlice()
	if err != nil {
		return Decision{}, fmt.Errorf("limits: %s: %w", policy, err)
	}
	d, err := decode(p, res)
	if err == nil && n == 1 { // a refusal of one cell refuses more cells too, not the reverse
		l.refusals.Remember(key, d, time.Now())
	}
	return d, err
}

// decode turns the script's reply {allowed, remaining, retry_after_ms, reset_ms} into a Decision.
func decode(p Policy, res []string) (Decision, error) {
	if len(res) != 4 {
		return Decision{}, fmt.Errorf("limits: malformed script reply %q", res)
	}
	d, _ := ParseReply(p.Burst, res[0], res[1], res[2], res[3])
	return d, nil
}
