package outbox

import (
	"testing"
	"time"
)

// The relay's retry waits grow from about 100 ms to about 2 s, never beyond 2 s ± 50%, and are
// jittered so instances that failed together spread out.
func TestRetryWait(t *testing.T) {
	seen := map[time.Duration]bool{}
	for i := 0; i < 50; i++ {
		if d := retryWait(1); d < 50*time.Millisecond || d > 151*time.Millisecond {
			t.Fatalf("first retry waits %v, want 100 ms ± 50%%", d)
		}
		for _, fails := range []int{6, 20, 1000} {
			if d := retryWait(fails); d < time.Second || d > 3*time.Second+time.Millisecond {
				t.Fatalf("retry %d waits %v, want 2 s ± 50%%", fails, d)
			}
		}
		seen[retryWait(10)] = true
	}
	if len(seen) < 10 {
		t.Fatalf("50 waits took %d distinct values: not jittered", len(seen))
	}
}
