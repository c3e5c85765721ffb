// Package redisconn opens flashsale's Redis connection: one address is a single node, more
// than one is a Redis Cluster. Both binaries and the tests use it.
package redisconn

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/logging"
)

var routeLogs sync.Once

// Open connects and pings; it fails with a message that says how to start Redis. go-redis's
// own log lines go into slog as throttled warnings.
func Open(ctx context.Context, addrs []string, db int) (redis.UniversalClient, error) {
	routeLogs.Do(func() { redis.SetLogger(logging.NewRedis()) })
	opt := &redis.UniversalOptions{
		Addrs:        addrs,
		DB:           db,
		DialTimeout:  2 * time.Second,
		ReadTimeout:  3 * time.Second,
		WriteTimeout: 3 * time.Second,
		// Deadlines reach the socket, and nothing is re-sent blindly: a command re-sent after
		// a read timeout may run twice. Scripts re-send themselves safely (lua.Script.Run).
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	}
	if len(addrs) > 1 {
		opt.DB = 0
	}
	rdb := redis.NewUniversalClient(opt)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis at %v is not answering (%w); start it with: redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no", addrs, err)
	}
	return rdb, nil
}
