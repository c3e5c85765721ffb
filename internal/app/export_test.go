package app

import (
	"context"
	"time"
)

// SetDrainWait replaces the shutdown drain's wait (cfg.ShutdownDrain), so a test ends the
// drain when it has seen what it checks rather than after a fixed time.
func SetDrainWait(a *API, f func(ctx context.Context, d time.Duration)) { a.drainWait = f }
