// Package testenv gives tests their own namespace on the real servers: a random Redis key
// prefix (cleaned up afterwards), a throw-away Postgres database, a local Redis Cluster.
// A missing server fails the test with the command that starts it; nothing is skipped.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/redisconn"
)

// RedisAddr is the shared test Redis (FLASHSALE_TEST_REDIS overrides).
func RedisAddr() string {
	if a := os.Getenv("FLASHSALE_TEST_REDIS"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// Token returns n random hex bytes, for names.
func Token(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Redis connects to the shared test Redis and returns a random key space; every key under it
// is deleted when the test ends. It never flushes the server.
func Redis(t testing.TB) (redis.UniversalClient, keyspace.Space) {
	t.Helper()
	ctx := context.Background()
	rdb, err := redisconn.Open(ctx, []string{RedisAddr()}, 0)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	space := keyspace.Space{Prefix: "t" + Token(6) + ":"}
	if err := exactlyonce.Load(ctx, rdb); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		DeletePrefix(t, rdb, space.Prefix)
		rdb.Close()
	})
	return rdb, space
}

// DeletePrefix removes every key starting with prefix (on every master of a cluster).
func DeletePrefix(t testing.TB, rdb redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	del := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var batch []string
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == 500 {
				for _, k := range batch {
					c.Unlink(ctx, k)
				}
				batch = batch[:0]
			}
		}
		for _, k := range batch {
			c.Unlink(ctx, k)
		}
		return iter.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return del(ctx, m) })
	case *redis.Client:
		err = del(ctx, c)
	}
	if err != nil && !strings.Contains(err.Error(), "closed") {
		t.Logf("testenv: cleanup of %s*: %v", prefix, err)
	}
}

// Matching returns the keys matching pattern (SCAN, on every master of a cluster). The pattern
// should start with the test's prefix: the server is shared.
func Matching(t testing.TB, rdb redis.UniversalClient, pattern string) []string {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			out = append(out, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		t.Fatalf("testenv: cannot scan a %T", rdb)
	}
	if err != nil {
		t.Fatalf("testenv: scan %s: %v", pattern, err)
	}
	return out
}

// OutboxEvents counts the events of one type (e.g. "item.upserted") in every shard's outbox
// stream, by item: a purchase batch's entry counts one event per order.
func OutboxEvents(t testing.TB, rdb redis.UniversalClient, keys keyspace.Space, typ string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for n := range keyspace.Shards {
		for _, e := range StreamEvents(t, rdb, keys.Shard(n).Outbox()) {
			if e.Type == typ {
				out[e.ItemID]++
			}
		}
	}
	return out
}

// StreamEvents returns the events an item outbox stream holds, as the relay would publish
// them (a purchase batch's entry gives one event per order).
func StreamEvents(t testing.TB, rdb redis.UniversalClient, stream string) []events.Event {
	t.Helper()
	entries, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Event
	for _, e := range entries {
		evs, err := events.EntryEvents(e.ID, e.Values)
		if err != nil {
			t.Fatalf("outbox %s entry %s: %v", stream, e.ID, err)
		}
		out = append(out, evs...)
	}
	return out
}

var callsRe = regexp.MustCompile(`calls=(\d+)`)

// Commands is how many commands the servers behind rdb have executed in all (INFO
// commandstats, summed over a cluster's masters; commands a script ran count too). Only a
// private server (PrivateRedis, Cluster) counts one test's commands alone; the INFO that
// measures counts one per server.
func Commands(t testing.TB, rdb redis.UniversalClient) int {
	t.Helper()
	ctx := context.Background()
	count := func(info string) int {
		n := 0
		for _, m := range callsRe.FindAllStringSubmatch(info, -1) {
			v, _ := strconv.Atoi(m[1])
			n += v
		}
		return n
	}
	if c, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		total := 0
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			info, err := m.Info(ctx, "commandstats").Result()
			mu.Lock()
			total += count(info)
			mu.Unlock()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return total
	}
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	return count(info)
}
