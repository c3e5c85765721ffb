package redisconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/redis/go-redis/v9"
)

// OpenWaiting calls open until it connects, with exponential backoff and jitter for at most wait
// (FLASHSALE_REDIS_START_TIMEOUT): everything starts at once and a Redis may be restarting or
// failing over. Past wait it returns an error naming the wait and the last cause. A refused
// login is not retried: waiting would not fix it.
func OpenWaiting(ctx context.Context, wait time.Duration, open func(context.Context) (redis.UniversalClient, error)) (redis.UniversalClient, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var last error
	attempts := 0
	rdb, err := backoff.Retry(wctx, func() (redis.UniversalClient, error) {
		attempts++
		rdb, err := open(wctx)
		if err != nil && (refusedLogin(err) || errors.Is(err, ErrInvalidSetting)) {
			return nil, backoff.Permanent(err)
		}
		if err != nil && (last == nil || wctx.Err() == nil) { // keep the cause, not the wait's end
			last = err
		}
		return rdb, err
	},
		backoff.WithBackOff(&backoff.ExponentialBackOff{InitialInterval: 200 * time.Millisecond,
			RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: 5 * time.Second}),
		backoff.WithMaxElapsedTime(wait),
		backoff.WithNotify(func(err error, next time.Duration) {
			if attempts == 1 || attempts%10 == 0 {
				slog.Warn("redis not reachable yet; retrying", "err", err, "attempt", attempts,
					"next_in", next.String(), "giving_up_after", wait.String())
			}
		}))
	switch {
	case err == nil:
		if attempts > 1 {
			slog.Info("redis reachable", "after_attempts", attempts)
		}
		return rdb, nil
	case ctx.Err() != nil:
		return nil, ctx.Err() // stopped (SIGTERM) while waiting
	case refusedLogin(err), errors.Is(err, ErrInvalidSetting):
		return nil, err
	case last == nil:
		last = err
	}
	return nil, fmt.Errorf("redis not reachable after %s and %d attempts (FLASHSALE_REDIS_START_TIMEOUT): %w", wait, attempts, last)
}

// refusedLogin reports Redis refusing the credentials (AUTH, ACL): a configuration error.
func refusedLogin(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "NOPERM")
}
