package outbox

import (
	"time"

	"github.com/cenkalti/backoff/v5"
)

// retryWait is how long Run waits after its fails-th failed round in a row: exponential from
// 100 ms to 2 s with ±50% jitter, so relays that lost Kafka or Redis together do not retry in
// step. Run keeps only the count, so the library's schedule is replayed to that step.
func retryWait(fails int) time.Duration {
	b := &backoff.ExponentialBackOff{InitialInterval: 100 * time.Millisecond, RandomizationFactor: 0.5,
		Multiplier: 2, MaxInterval: 2 * time.Second}
	d := b.NextBackOff()
	for i := 1; i < min(fails, 8); i++ { // 100 ms · 2^5 passes the 2 s cap: 8 steps are plenty
		d = b.NextBackOff()
	}
	return d
}
