// Package redisconn opens flashsale's Redis connection: one address is a single node, more
// than one is a Redis Cluster. Both binaries and the tests use it.
package redisconn

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/logging"
)

// Security is how the clients log in to Redis and encrypt: an ACL user and password (AUTH,
// FLASHSALE_REDIS_USERNAME and _PASSWORD) and TLS (from _TLS and _CA_FILE, built by config).
type Security struct {
	Username, Password string
	TLS                *tls.Config // nil: plaintext
}

var routeLogs sync.Once

// Open connects without a login; see OpenSecure.
func Open(ctx context.Context, addrs []string, db int) (redis.UniversalClient, error) {
	return OpenSecure(ctx, addrs, db, Security{})
}

// OpenSecure connects with sec's login and TLS, and pings; it fails with a message that says
// how to start Redis. go-redis's own log lines go into slog as throttled warnings.
func OpenSecure(ctx context.Context, addrs []string, db int, sec Security) (redis.UniversalClient, error) {
	routeLogs.Do(func() { redis.SetLogger(logging.NewRedis()) })
	opt := &redis.UniversalOptions{
		Addrs:        addrs,
		DB:           db,
		Username:     sec.Username,
		Password:     sec.Password,
		TLSConfig:    sec.TLS,
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
