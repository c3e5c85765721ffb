package outbox

import (
	"time"

	"github.com/cenkalti/backoff/v5"
)

// retryWait is how long Run waits before retrying after its fails-th failed round in a row:
// exponential from 100 ms to 2 s with ±50% jitter (cenkalti/backoff), so the relays of every
// api instance that lost Kafka or Redis together do not retry in step. It is a function of the
// count alone (Run keeps only the count): the library's schedule is replayed to that step,
// which stops growing at the cap after a handful.
func retryWait(fails int) time.Duration {
	b := &backoff.ExponentialBackOff{InitialInterval: 100 * time.Millisecond, RandomizationFactor: 0.5,
		Multiplier: 2, MaxInterval: 2 * time.Second}
	d := b.NextBackOff()
	for i := 1; i < min(fails, 8); i++ { // 100 ms · 2^5 passes the 2 s cap: 8 steps are plenty
		d = b.NextBackOff()
	}
	return d
}
