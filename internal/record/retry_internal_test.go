package record

import (
	"testing"
	"time"
)

// The consumer's retry waits start near 200 ms, stop growing at the cap (± 50% jitter), and
// are jittered, so reconcilers that lost Kafka or Postgres together spread their retries.
func TestRetryBackoff(t *testing.T) {
	seen := map[time.Duration]bool{}
	for i := 0; i < 20; i++ {
		b := retryBackoff(5 * time.Second)
		if d := b.NextBackOff(); d < 100*time.Millisecond || d > 301*time.Millisecond {
			t.Fatalf("first wait %v, want 200 ms ± 50%%", d)
		}
		var d time.Duration
		for j := 0; j < 30; j++ {
			d = b.NextBackOff()
		}
		if d < 2500*time.Millisecond || d > 7500*time.Millisecond+time.Millisecond {
			t.Fatalf("wait after 30 failures %v, want 5 s ± 50%%", d)
		}
		seen[d] = true
		b.Reset()
		if d := b.NextBackOff(); d > 301*time.Millisecond {
			t.Fatalf("after Reset (a success) the wait is %v, want about 200 ms again", d)
		}
	}
	if len(seen) < 5 {
		t.Fatalf("20 capped waits took %d distinct values: not jittered", len(seen))
	}
}
