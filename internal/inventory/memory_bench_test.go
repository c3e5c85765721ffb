package inventory_test

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// BenchmarkOrderMemory is Redis memory per order: 100,000 concurrent purchases by 20,000
// shoppers on a private server with no relay, reporting used_memory's growth and each
// structure's MEMORY USAGE (orders, held, uorders, expiry, outbox, call, rest) per order.
// Run: go test -run=^$ -bench=OrderMemory -benchtime=1x ./internal/inventory/
func BenchmarkOrderMemory(b *testing.B) {
	const purchases, users, workers = 100_000, 20_000, 64
	rdb, keys, _ := testenv.PrivateRedis(b) // its own server: FLUSHDB between runs is ours to do
	ctx := context.Background()
	for range b.N {
		if err := rdb.FlushDB(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
		newItem(b, s, "mem", 1_000_000_000_000, 1_000_000_000)
		mem0 := usedMemory(b, rdb)
		var n atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := n.Add(1); i <= purchases; i = n.Add(1) {
					u := "u" + strconv.FormatInt(i%users, 10)
					if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "mem", UserID: u, Quantity: 1}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		grown := usedMemory(b, rdb) - mem0
		parts := structureMemory(b, rdb, keys.Prefix)
		b.ReportMetric(float64(grown)/purchases, "used-B/order")
		names := make([]string, 0, len(parts))
		for name := range parts {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			b.ReportMetric(float64(parts[name])/purchases, name+"-B/order")
		}
	}
}

// usedMemory is INFO memory's used_memory.
func usedMemory(b *testing.B, rdb redis.UniversalClient) int64 {
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("INFO memory has no used_memory")
	return 0
}

// structureMemory sums MEMORY USAGE (every element sampled) of every key under prefix by
// structure: the key's name with the prefix, the shard tag and the item part taken off, up to
// its next ':' ("orders", "uorders", "call", ...).
func structureMemory(b *testing.B, rdb redis.UniversalClient, prefix string) map[string]int64 {
	ctx := context.Background()
	out := map[string]int64{}
	var cursor uint64
	for {
		ks, next, err := rdb.Scan(ctx, cursor, prefix+"*", 5000).Result()
		if err != nil {
			b.Fatal(err)
		}
		pipe := rdb.Pipeline()
		usage := make([]*redis.IntCmd, len(ks))
		for i, k := range ks {
			usage[i] = pipe.MemoryUsage(ctx, k, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		for i, k := range ks {
			out[structureOf(strings.TrimPrefix(k, prefix))] += usage[i].Val()
		}
		if cursor = next; cursor == 0 {
			return out
		}
	}
}

func structureOf(key string) string {
	if _, rest, ok := strings.Cut(key, "}:"); ok {
		key = rest
	}
	if rest, ok := strings.CutPrefix(key, "i:"); ok {
		if _, after, ok := strings.Cut(rest, ":"); ok { // the item id has no ':'
			key = after
		}
	}
	name, _, _ := strings.Cut(key, ":")
	return name
}
