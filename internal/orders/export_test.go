package orders

import "time"

// SetHostClock makes the store read this host's clock from host (a clock that runs behind
// Redis's, say) and measure its offset from Redis again on its next use.
func (s *Store) SetHostClock(host func() time.Time) {
	s.clock.host = host
	s.clock.check.Store(0)
}
