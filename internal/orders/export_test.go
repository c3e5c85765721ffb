package orders

import (
	"context"
	"time"
)

// SetHostClock makes the store read this host's clock from host (a clock that runs behind
// Redis's, say) and measure its offset from Redis again on its next use.
func (s *Store) SetHostClock(host func() time.Time) {
	s.clock.host = host
	s.clock.check.Store(0)
}

// ExpireEntries runs one expire script call on the given expiry entries of item.
func (s *Store) ExpireEntries(ctx context.Context, item string, entries ...string) (ExpireResult, error) {
	args := make([]any, len(entries))
	for i, e := range entries {
		args[i] = e
	}
	return s.expireOrders(ctx, item, args)
}
