package paysim

import (
	"testing"
	"time"
)

// TestBackoff: the wait after the n-th failed attempt doubles from RetryMin, never passes
// RetryMax, and is jittered in its upper half.
func TestBackoff(t *testing.T) {
	s := New(Config{RetryMin: 100 * time.Millisecond, RetryMax: 3 * time.Second})
	defer s.Close()
	for n, full := range map[int]time.Duration{
		1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond,
		5: 1600 * time.Millisecond, 6: 3 * time.Second, 50: 3 * time.Second,
	} {
		for range 100 {
			if b := s.hooks.backoff(n); b < full/2 || b > full {
				t.Fatalf("backoff after %d failures: %s, want [%s, %s]", n, b, full/2, full)
			}
		}
	}
}
