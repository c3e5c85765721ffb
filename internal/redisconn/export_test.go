package redisconn

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// WaitCount is how many replicas a change of key through rdb waits for now, or why it is
// refused before it runs.
func WaitCount(ctx context.Context, rdb redis.UniversalClient, key string) (int, error) {
	return watchOf(rdb).Admit(ctx, key)
}
