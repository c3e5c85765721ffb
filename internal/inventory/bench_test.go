package inventory_test

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// BenchmarkPurchase compares, in one run, inventory.Purchase (coalescing concurrent purchases
// of one item into one script call) with a plain EVALSHA of the same script per purchase.
// Run: go test -run=^$ -bench=Purchase -benchtime=3s ./internal/inventory/
func BenchmarkPurchase(b *testing.B) {
	rdb, keys := testenv.Redis(b)
	ctx := context.Background()
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	newItem(b, s, "bench", 1_000_000_000_000, 1_000_000_000)
	var n atomic.Int64

	b.Run("plain-evalsha", func(b *testing.B) {
		k := keys.Item("bench")
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				u := "u" + strconv.FormatInt(n.Add(1)%5000, 10)
				err := inventory.PurchaseScript.Run(ctx, rdb,
					[]string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(), k.PurchaseLimits(), k.QueueTickets(), k.UserOrders(), k.Idempotency(u, "")},
					600000, 86400000, 0, 0, 0, "bench", u, 1, "", "").Err()
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("store-coalesced", func(b *testing.B) {
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				u := "u" + strconv.FormatInt(n.Add(1)%5000, 10)
				if _, err := s.Purchase(ctx, inventory.PurchaseRequest{ItemID: "bench", UserID: u, Quantity: 1}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkCallRecord is the cost of the exactly-once call record: one batch of 20 purchases
// sent bare and recorded, in alternating turns so the machine's load falls on both alike. It
// reports purchases/s and Redis CPU per purchase (INFO cpu, private server) and their ratios.
// Run: go test -run=^$ -bench=CallRecord -benchtime=20x ./internal/inventory/
func BenchmarkCallRecord(b *testing.B) {
	rdb, keys, _ := testenv.PrivateRedis(b) // its own server: nobody else's commands in its CPU
	ctx := context.Background()
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	newItem(b, s, "rec", 1_000_000_000_000, 1_000_000_000)
	k := keys.Item("rec")
	bare := exactlyonce.Bare("lib/gcra.lua", "lib/changed.lua", "inventory/purchase.lua")
	if err := bare.Load(ctx, rdb).Err(); err != nil {
		b.Fatal(err)
	}
	const batch, batchesPerTurn, senders = 20, 400, 4
	var n atomic.Int64
	batchArgs := func() ([]string, []any) {
		keys := []string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(), k.PurchaseLimits(), k.QueueTickets(), k.UserOrders()}
		args := []any{600000, 86400000, 0, 0, 0, "rec"}
		for range batch {
			u := "u" + strconv.FormatInt(n.Add(1)%5000, 10)
			keys = append(keys, k.Idempotency(u, ""))
			args = append(args, u, 1, "", "")
		}
		return keys, args
	}
	sides := []struct {
		name      string
		send      func(keys []string, args []any) error
		cpu, wall float64
	}{
		{name: "bare", send: func(keys []string, args []any) error { return bare.EvalSha(ctx, rdb, keys, args...).Err() }},
		{name: "recorded", send: func(keys []string, args []any) error {
			return inventory.PurchaseScript.Run(ctx, rdb, keys, args...).Err()
		}},
	}
	b.ResetTimer()
	for turn := range b.N {
		for i := range sides {
			side := &sides[(turn+i)%2] // alternate which side goes first
			cpu0, t0 := redisCPU(b, rdb), time.Now()
			var wg sync.WaitGroup
			for range senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range batchesPerTurn / senders {
						if err := side.send(batchArgs()); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			side.wall += time.Since(t0).Seconds()
			side.cpu += redisCPU(b, rdb) - cpu0
		}
		// Keep the item's streams and indexes from growing across turns.
		rdb.Del(ctx, k.Outbox(), k.Orders(), k.Expiry(), k.Held(), k.UserOrders())
	}
	purchases := float64(b.N * batchesPerTurn * batch)
	for _, side := range sides {
		b.ReportMetric(purchases/side.wall, side.name+"-purchases/s")
		b.ReportMetric(side.cpu*1e6/purchases, side.name+"-redis-µs/purchase")
	}
	b.ReportMetric(sides[1].cpu/sides[0].cpu, "recorded/bare-redis-cpu")
	b.ReportMetric(sides[0].wall/sides[1].wall, "recorded/bare-rate")
}

// redisCPU is the server's user+sys CPU seconds so far.
func redisCPU(b *testing.B, rdb redis.UniversalClient) float64 {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total
}

// BenchmarkPurchaseScriptParts is where purchase.lua's Redis time goes: the script as the api
// sends it beside variants each without one part (and FLASHSALE_BENCH_ALT_LUA's candidates),
// in turns on a private server; a variant's CPU per purchase minus the full one's is its cost.
// Run: go test -run=^$ -bench=PurchaseScriptParts -benchtime=20x ./internal/inventory/
func BenchmarkPurchaseScriptParts(b *testing.B) {
	rdb, keys, _ := testenv.PrivateRedis(b)
	ctx := context.Background()
	s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	type variant struct {
		name string
		src  string
		rate int
		bare bool   // without the call record
		libs string // the libraries before it: the current ones unless a candidate brings its own
		cpu  float64
		item keyspace.Item
		n    atomic.Int64 // the variant's purchases so far: its next shopper
	}
	// without replaces old[i] by old[i+1] in purchase (pairs).
	without := func(purchase string, old ...string) string {
		for i := 0; i+1 < len(old); i += 2 {
			if !strings.Contains(purchase, old[i]) {
				b.Fatalf("purchase.lua no longer has %q", old[i])
			}
			purchase = strings.Replace(purchase, old[i], old[i+1], 1)
		}
		return purchase
	}
	outbox := "redis.call('XADD', KEYS[5], '*', 'type', 'order.reserved', 'item', item_id,\n    'seq', string.format('%d', first_seq), 'p', price, 'c', now_s, 'e', expires_s,\n    'b', table.concat(batch_list, '|', 1, nb))"
	cur := readPurchaseSource(b, "../../lua/")
	vs := []*variant{
		{name: "full", src: cur.purchase, rate: 5},
		{name: "no-limit", src: cur.purchase, rate: 0},
		{name: "no-user-index", src: without(cur.purchase,
			"redis.call('HMGET', KEYS[10], unpack(users, 1, nu))", "{}",
			"redis.call('HSET', KEYS[10], unpack(user_seqs, 1, na))", ""), rate: 5},
		{name: "no-expiry-index", src: without(cur.purchase, "redis.call('ZADD', KEYS[4], expires_s, member)", ""), rate: 5},
		{name: "no-outbox", src: without(cur.purchase, outbox, ""), rate: 5},
		{name: "no-call-record", src: cur.purchase, rate: 5, bare: true},
	}
	for name, dir := range altLuaDirs() { // candidate versions, same KEYS and ARGV
		alt := readPurchaseSource(b, dir)
		vs = append(vs, &variant{name: name, src: alt.purchase, libs: alt.libs, rate: 5})
	}
	scripts := make([]*redis.Script, len(vs))
	for i, v := range vs {
		id := "parts" + strconv.Itoa(i)
		newItem(b, s, id, 1_000_000_000_000, 1_000_000_000)
		v.item = keys.Item(id)
		src := purchaseSource{once: cur.once, libs: cmp.Or(v.libs, cur.libs), purchase: v.src}
		if v.bare {
			scripts[i] = redis.NewScript(src.libs + src.purchase)
		} else {
			scripts[i] = redis.NewScript(src.recorded())
		}
		if err := scripts[i].Load(ctx, rdb).Err(); err != nil {
			b.Fatal(v.name, err)
		}
	}
	const batchesPerTurn, senders = 400, 4
	const shoppers = 20_000
	// FLASHSALE_BENCH_BATCH sets the attempts per call: two sizes tell the cost per call from
	// the cost per attempt.
	batch := 25
	if n, err := strconv.Atoi(os.Getenv("FLASHSALE_BENCH_BATCH")); err == nil && n > 0 {
		batch = n
	}
	var calls atomic.Int64
	args := func(v *variant) ([]string, []any) {
		k := v.item
		keys := []string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(), k.PurchaseLimits(), k.QueueTickets(), k.UserOrders()}
		args := []any{600000, 86400000, v.rate, 1000, 10, k.ID}
		for range batch {
			u := "u" + strconv.FormatInt(v.n.Add(1)%shoppers, 10)
			keys = append(keys, k.Hash())
			args = append(args, u, 1, "", "")
		}
		if !v.bare {
			keys = append(keys, k.Hash()+":call:"+strconv.FormatInt(calls.Add(1), 10))
			args = append(args, time.Now().UnixMilli()+60000) // the call deadline (once.lua)
		}
		return keys, args
	}
	b.ResetTimer()
	for turn := range b.N {
		for i := range vs {
			j := (turn + i) % len(vs)
			v := vs[j]
			cpu0 := redisCPU(b, rdb)
			var wg sync.WaitGroup
			for range senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range batchesPerTurn / senders {
						keys, args := args(v)
						if err := scripts[j].EvalSha(ctx, rdb, keys, args...).Err(); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			v.cpu += redisCPU(b, rdb) - cpu0
		}
		// The orders go each turn and the users' structures every 10, so about one order in five is
		// its shopper's first of the item; FLASHSALE_BENCH_KEEP keeps them all, as in a long sale.
		for _, v := range vs {
			if os.Getenv("FLASHSALE_BENCH_KEEP") != "" {
				break
			}
			k := v.item
			rdb.Del(ctx, k.Outbox(), k.Orders(), k.Expiry(), k.Held(), k.PurchaseLimits())
			if turn%10 == 9 {
				rdb.Del(ctx, k.UserOrders())
			}
		}
	}
	purchases := float64(b.N * batchesPerTurn * batch)
	for _, v := range vs {
		b.ReportMetric(v.cpu*1e6/purchases, v.name+"-µs/purchase")
	}
}

// purchaseSource is purchase.lua as the api sends it, in parts: the call record around it
// (once.lua), the libraries before it (gcra.lua, changed.lua) and the script itself.
type purchaseSource struct{ once, libs, purchase string }

// readPurchaseSource reads the parts from a lua directory (ending in "/").
func readPurchaseSource(b *testing.B, dir string) purchaseSource {
	var out [4]string
	for i, name := range []string{"lib/once.lua", "lib/gcra.lua", "lib/changed.lua", "inventory/purchase.lua"} {
		src, err := os.ReadFile(dir + name)
		if errors.Is(err, fs.ErrNotExist) { // another version's flat lua/ folder
			src, err = os.ReadFile(dir + filepath.Base(name))
		}
		if err != nil {
			b.Fatal(err)
		}
		out[i] = string(src)
	}
	return purchaseSource{once: out[0], libs: out[1] + "\n" + out[2] + "\n", purchase: out[3]}
}

// recorded is the whole script the api runs: libraries and purchase.lua inside the call record.
func (p purchaseSource) recorded() string {
	before, after, _ := strings.Cut(p.once, "--[[ script ]]")
	return before + p.libs + p.purchase + "\n" + after
}

// altLuaDirs are the candidate lua directories of FLASHSALE_BENCH_ALT_LUA (comma-separated),
// by name (the directory's base name), each ending in "/".
func altLuaDirs() map[string]string {
	dirs := map[string]string{}
	for _, dir := range strings.FieldsFunc(os.Getenv("FLASHSALE_BENCH_ALT_LUA"), func(r rune) bool { return r == ',' }) {
		dirs[filepath.Base(dir)] = strings.TrimSuffix(dir, "/") + "/"
	}
	return dirs
}

// BenchmarkPurchaseMemory is the Redis memory per order of what purchase.lua keeps beside the
// orders: the outbox (until relayed) and the call records (until a second past their deadline),
// by MEMORY USAGE, batches sent as BenchmarkPurchaseScriptParts sends them.
// Run: go test -run=^$ -bench=PurchaseMemory -benchtime=1x ./internal/inventory/
func BenchmarkPurchaseMemory(b *testing.B) {
	dirs := altLuaDirs()
	dirs["current"] = "../../lua/"
	for name, dir := range dirs {
		script := redis.NewScript(readPurchaseSource(b, dir).recorded())
		b.Run(name, func(b *testing.B) {
			rdb, keys, _ := testenv.PrivateRedis(b)
			ctx := context.Background()
			s := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
			newItem(b, s, "mem", 1_000_000_000_000, 1_000_000_000)
			k := keys.Item("mem")
			const batch, batches = 25, 400
			for i := range b.N * batches {
				ks := []string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(), k.PurchaseLimits(), k.QueueTickets(), k.UserOrders()}
				args := []any{600000, 86400000, 5, 1000, 10, "mem"}
				for j := range batch {
					u := "u" + strconv.Itoa((i*batch+j)%20000)
					ks = append(ks, k.Hash())
					args = append(args, u, 1, "", "")
				}
				ks = append(ks, k.Hash()+":call:"+strconv.Itoa(i))
				args = append(args, time.Now().UnixMilli()+600000) // records outlive the run
				if err := script.Run(ctx, rdb, ks, args...).Err(); err != nil {
					b.Fatal(err)
				}
			}
			// The orders the calls made, whatever the version's reply says of them.
			made := rdb.HLen(ctx, k.Orders()).Val()
			outbox := rdb.MemoryUsage(ctx, k.Outbox(), 0).Val()
			var calls int64
			iter := rdb.Scan(ctx, 0, keys.Prefix+"*:call:*", 1000).Iterator()
			for iter.Next(ctx) {
				calls += rdb.MemoryUsage(ctx, iter.Val(), 0).Val()
			}
			if err := iter.Err(); err != nil || made == 0 {
				b.Fatalf("%d orders made: %v", made, err)
			}
			b.ReportMetric(float64(outbox)/float64(made), "outbox-B/order")
			b.ReportMetric(float64(calls)/float64(made), "call-records-B/order")
			b.ReportMetric(float64(made)/float64(b.N*batches*batch), "orders/attempt")
		})
	}
}
