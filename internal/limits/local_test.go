package limits_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/limits"
)

// TestLocal: the in-memory limiter allows a burst, then the rate, per subject; a refusal says
// when to retry and changes nothing; subjects are independent; a policy that is off lets
// everything through.
func TestLocal(t *testing.T) {
	l, err := limits.NewLocal(limits.Policy{Rate: 10, Period: time.Second, Burst: 3})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	for i := range 3 {
		d := l.Allow("u", now)
		if !d.Allowed || d.Limit != 3 || d.Remaining != 2-i {
			t.Fatalf("request %d of the burst: %+v", i, d)
		}
	}
	d := l.Allow("u", now)
	if d.Allowed || d.RetryAfter != 100*time.Millisecond || d.Remaining != 0 {
		t.Fatalf("past the burst: %+v, want refused, retry in 100ms", d)
	}
	if d := l.Allow("u", now.Add(99*time.Millisecond)); d.Allowed {
		t.Fatalf("before the retry time: %+v", d)
	}
	if d := l.Allow("u", now.Add(100*time.Millisecond)); !d.Allowed {
		t.Fatalf("at the retry time: %+v", d)
	}
	if d := l.Allow("v", now); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("another subject: %+v", d)
	}
	// Over 10 s at most burst + rate*10 pass.
	allowed := 0
	for ms := 0; ms < 10_000; ms++ {
		if l.Allow("w", now.Add(time.Duration(ms)*time.Millisecond)).Allowed {
			allowed++
		}
	}
	if allowed > 3+100 || allowed < 100 {
		t.Fatalf("%d allowed over 10 s at 10/s burst 3", allowed)
	}
	off, _ := limits.NewLocal(limits.Policy{})
	for range 100 {
		if !off.Allow("u", now).Allowed {
			t.Fatal("a policy that is off refused")
		}
	}
	if _, err := limits.NewLocal(limits.Policy{Rate: 1, Period: time.Second}); err == nil {
		t.Fatal("burst 0 accepted")
	}
}

// Memory stays bounded: subjects whose bucket is full again are forgotten as new ones come.
func TestLocalForgetsFullBuckets(t *testing.T) {
	l, _ := limits.NewLocal(limits.Policy{Rate: 1, Period: time.Millisecond, Burst: 1})
	now := time.Unix(1_700_000_000, 0)
	for i := range 1_000_000 {
		l.Allow(strconv.Itoa(i), now.Add(time.Duration(i)*time.Millisecond))
	}
	if n := l.Subjects(); n > 64*2048 {
		t.Fatalf("%d subjects held after a million one-off subjects", n)
	}
}
