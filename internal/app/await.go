package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/redisconn"
)

// AwaitPostgres returns once Postgres takes a connection. Compose and `make run` start
// everything at once, and a managed database may be failing over, so every reconciler command
// waits for it rather than exiting at once: retries with exponential backoff and jitter (cenkalti/backoff),
// for at most cfg.PostgresStartWait, then an error naming the wait and the last cause.
func AwaitPostgres(ctx context.Context, cfg config.Config) error {
	wctx, cancel := context.WithTimeout(ctx, cfg.PostgresStartWait)
	defer cancel()
	var last error
	attempts := 0
	_, err := backoff.Retry(wctx, func() (struct{}, error) {
		attempts++
		// One attempt may not use up the whole wait on a host that swallows packets.
		actx, cancel := context.WithTimeout(wctx, 10*time.Second)
		defer cancel()
		err := record.Ping(actx, cfg.PostgresDSN)
		if refusedLogin(err) || missingDatabase(err) { // waiting would not fix either
			return struct{}{}, backoff.Permanent(err)
		}
		if err != nil && (last == nil || wctx.Err() == nil) { // keep the cause, not the wait's end
			last = err
		}
		return struct{}{}, err
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
	case refusedLogin(err):
		return &BadSetting{fmt.Errorf("postgres refused the login (check the role and password of FLASHSALE_POSTGRES_DSN): %w", err)}
	case missingDatabase(err):
		return &BadSetting{fmt.Errorf("postgres has no such database (check the database name of FLASHSALE_POSTGRES_DSN, or create it): %w", err)}
	case last == nil:
		last = err
	}
	return fmt.Errorf("postgres not reachable after %s and %d attempts (FLASHSALE_POSTGRES_START_TIMEOUT): %w",
		cfg.PostgresStartWait, attempts, last)
}

// awaitRedis connects to Redis as cfg says, retrying for at most cfg.RedisStartWait: both
// binaries may start before it does.
func awaitRedis(ctx context.Context, cfg config.Config) (redis.UniversalClient, error) {
	return redisconn.OpenWaiting(ctx, cfg.RedisStartWait, func(ctx context.Context) (redis.UniversalClient, error) {
		return redisconn.OpenWith(ctx, cfg.RedisOptions())
	})
}

// BadSetting is an invalid setting found only when used (a Postgres refusing the login or
// missing the database): the command exits 2 at once, since waiting cannot fix it.
type BadSetting struct{ err error }

func (e *BadSetting) Error() string { return e.err.Error() }
func (e *BadSetting) Unwrap() error { return e.err }

// missingDatabase reports Postgres answering that the DSN's database does not exist
// (SQLSTATE 3D000): a configuration error.
func missingDatabase(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "3D000"
}

// refusedLogin reports Postgres refusing the login: SQLSTATE class 28 (invalid authorization:
// no such role, wrong password, not allowed by pg_hba.conf). A configuration error.
func refusedLogin(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && strings.HasPrefix(pe.Code, "28")
}
