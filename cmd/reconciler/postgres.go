package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/record"
)

// awaitPostgres returns once Postgres takes a connection. Compose and `make run` start
// everything at once, and a managed database may be failing over, so every command waits for
// it rather than exiting at once: retries with exponential backoff and jitter (cenkalti/backoff),
// for at most cfg.PostgresStartWait, then an error naming the wait and the last cause.
func awaitPostgres(ctx context.Context, cfg config.Config) error {
	wctx, cancel := context.WithTimeout(ctx, cfg.PostgresStartWait)
	defer cancel()
	var last error
	attempts := 0
	_, err := backoff.Retry(wctx, func() (struct{}, error) {
		attempts++
		// One attempt may not use up the whole wait on a host that swallows packets.
		actx, cancel := context.WithTimeout(wctx, 10*time.Second)
		defer cancel()
		last = record.Ping(actx, cfg.PostgresDSN)
		return struct{}{}, last
	},
		backoff.WithBackOff(&backoff.ExponentialBackOff{InitialInterval: 200 * time.Millisecond,
			RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: 5 * time.Second}),
		backoff.WithMaxElapsedTime(cfg.PostgresStartWait),
		backoff.WithNotify(func(err error, next time.Duration) {
			if attempts == 1 || attempts%10 == 0 {
				slog.Warn("postgres not reachable yet; retrying", "err", err, "attempt", attempts,
					"next_in", next.String(), "giving_up_after", cfg.PostgresStartWait.String())
			}
		}))
	switch {
	case err == nil:
		if attempts > 1 {
			slog.Info("postgres reachable", "after_attempts", attempts)
		}
		return nil
	case ctx.Err() != nil:
		return ctx.Err() // stopped (SIGTERM) while waiting
	case last == nil:
		last = err
	}
	return fmt.Errorf("postgres not reachable after %s and %d attempts (FLASHSALE_POSTGRES_START_TIMEOUT): %w",
		cfg.PostgresStartWait, attempts, last)
}
