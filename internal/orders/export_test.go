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

// SetUnlistGrace sets how long an index field that names no order stays marked before it goes.
func (s *Store) SetUnlistGrace(d time.Duration) { s.index.grace = d }

// ExpireEntries runs one expire script call on the given expiry entries of item.
func (s *Store) ExpireEntries(ctx context.Context, item string, entries ...string) (ExpireResult, error) {
	args := make([]any, len(entries))
	for i, e := range entries {
		args[i] = e
	}
	return s.expireOrders(ctx, item, args)
}
