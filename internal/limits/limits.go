// Package limits owns rate limiting: GCRA policies evaluated in Redis (lua/gcra.lua) and the
// decisions handed to the HTTP layer for the RateLimit-* headers.
package limits

import (
	"errors"
	"strconv"
	"time"
)

// ErrRateLimited means a policy refused the request; the Decision says when to retry.
var ErrRateLimited = errors.New("rate limited")

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
	return Decision{
		Allowed:    allowed == "1",
		Limit:      limit,
		Remaining:  rem,
		RetryAfter: time.Duration(retry * float64(time.Millisecond)),
		Reset:      time.Duration(reset * float64(time.Millisecond)),
	}, true
}

// Limiter evaluates named GCRA policies in Redis. (Built in issue 4.)
type Limiter struct{}
