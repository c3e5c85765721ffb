// Package redisconn opens flashsale's Redis connection for both binaries and the tests: one
// address is a single node, more a Cluster, Sentinels name a primary to follow. With replicas
// required (Options.AckReplicas) it watches every primary's replicas (replication.go), so a
// change is refused when too few are live and acknowledged once they hold it.
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

// Options is how to reach Redis.
type Options struct {
	Addrs    []string // one: a single node; more: a Redis Cluster (unused with Sentinels)
	DB       int      // single node and Sentinel only
	Security Security
	// Sentinels (host:port) name the primary MasterName; the client follows it when it
	// changes (the node a majority of them names: sentinel.go). SentinelPassword is the
	// Sentinels' own.
	Sentinels        []string
	MasterName       string
	SentinelPassword string
	// AckReplicas replicas must hold a state change before it is acknowledged (WAIT, within
	// AckTimeout); 0: none; AckAuto: every replica that could be promoted (replication.go).
	AckReplicas int
	AckTimeout  time.Duration
	// SentinelLease is how long changes go on without a majority of the Sentinels confirming
	// the primary; it must be shorter than their down-after time.
	SentinelLease time.Duration
	// PoolSize is the connections per node (0: go-redis's default).
	PoolSize int
}

var routeLogs sync.Once

// Open connects without a login; see OpenWith.
func Open(ctx context.Context, addrs []string, db int) (redis.UniversalClient, error) {
	return OpenWith(ctx, Options{Addrs: addrs, DB: db})
}

// OpenSecure connects with sec's login and TLS; see OpenWith.
func OpenSecure(ctx context.Context, addrs []string, db int, sec Security) (redis.UniversalClient, error) {
	return OpenWith(ctx, Options{Addrs: addrs, DB: db, Security: sec})
}

// OpenWith connects as o says and pings; it fails with a message that says how to start Redis.
// go-redis's own log lines go into slog as throttled warnings. Behind Sentinels or a Cluster,
// and with replicas required, a watch of the primaries runs until the client is closed.
func OpenWith(ctx context.Context, o Options) (redis.UniversalClient, error) {
	routeLogs.Do(func() { redis.SetLogger(logging.NewRedis()) })
	w, err := newWatch(ctx, o)
	if err != nil {
		return nil, err
	}
	rdb := newClient(o, w.sent)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		if w.sent != nil {
			w.sent.close()
			return nil, fmt.Errorf("redis primary %q at %s, named by the Sentinels %v, is not answering (%w)", o.MasterName, w.sent.current(), o.Sentinels, err)
		}
		return nil, fmt.Errorf("redis at %v is not answering (%w); start it with: redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no", o.Addrs, err)
	}
	if err := w.start(ctx, rdb); err != nil {
		rdb.Close()
		if w.sent != nil {
			w.sent.close()
		}
		return nil, err
	}
	return rdb, nil
}

// WithPool returns a client to the same Redis as rdb (same primaries, login, TLS, replicas
// required) with a pool of its own of size connections per node, for a caller whose blocking
// reads would hold the shared pool's connections. The caller closes it.
func WithPool(rdb redis.UniversalClient, size int) redis.UniversalClient {
	if w := watchOf(rdb); w != nil {
		o := w.opt
		o.PoolSize = size
		c := newClient(o, w.sent)
		w.share(c)
		return c
	}
	switch c := rdb.(type) {
	case *redis.Client:
		o := *c.Options()
		o.PoolSize = size
		return redis.NewClient(&o)
	case *redis.ClusterClient:
		o := *c.Options()
		o.PoolSize = size
		return redis.NewClusterClient(&o)
	}
	return rdb // another kind of client: shared, as given
}

// newClient makes the client; behind Sentinels (sent) it is a plain client whose connections
// go to the node the Sentinels' majority names (sentinels.dial).
func newClient(o Options, sent *sentinels) redis.UniversalClient {
	opt := &redis.UniversalOptions{
		Addrs:        o.Addrs,
		DB:           o.DB,
		Username:     o.Security.Username,
		Password:     o.Security.Password,
		TLSConfig:    o.Security.TLS,
		PoolSize:     o.PoolSize,
		DialTimeout:  2 * time.Second,
		ReadTimeout:  3 * time.Second,
		WriteTimeout: 3 * time.Second,
		// Deadlines reach the socket, and nothing is re-sent blindly: a command re-sent after
		// a read timeout may run twice. Scripts re-send themselves safely (exactlyonce.Script.Run).
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	}
	if sent != nil {
		return redis.NewClient(&redis.Options{
			Addr: "sentinels/" + o.MasterName, Dialer: sent.dial, DB: o.DB,
			Username: opt.Username, Password: opt.Password, PoolSize: opt.PoolSize,
			DialTimeout: opt.DialTimeout, ReadTimeout: opt.ReadTimeout, WriteTimeout: opt.WriteTimeout,
			ContextTimeoutEnabled: true, MaxRetries: -1,
		})
	}
	if len(o.Addrs) > 1 {
		opt.DB = 0
	}
	return redis.NewUniversalClient(opt)
}
