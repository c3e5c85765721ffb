package reconcile_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// benchOrders is how many orders the benchmarks seed (FLASHSALE_BENCH_ORDERS, default 100k).
func benchOrders() int {
	if n, err := strconv.Atoi(os.Getenv("FLASHSALE_BENCH_ORDERS")); err == nil && n > 0 {
		return n
	}
	return 100_000
}

const benchItems = 100

type seeded struct {
	rdb  redis.UniversalClient
	keys keyspace.Space
	db   *pgxpool.Pool   // the benchmark's own reads
	rec  *record.Queries // what the reconciler reads
	n    int
}

// seed writes n orders over benchItems items straight into both stores (pipelined HSETs,
// COPY), identical on both sides, on a private Redis.
func seed(b *testing.B, n int) seeded {
	rdb, keys, _ := testenv.PrivateRedis(b)
	dsn := testenv.Postgres(b)
	db, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(db.Close)
	rec, err := record.OpenQueries(dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rec.Close)
	ctx := context.Background()
	start := time.Now()
	per := n / benchItems
	now := time.Now().UnixMilli()
	var rows [][]any
	for i := 0; i < benchItems; i++ {
		item := fmt.Sprintf("it%03d", i)
		k := keys.Item(item)
		pipe := rdb.Pipeline()
		var reserved, paid int64
		fields := make([]any, 0, 2000)
		for j := 1; j <= per; j++ {
			status := [...]string{"reserved", "paid", "cancelled", "expired"}[j%4]
			qty := int64(1 + j%3)
			switch status {
			case "reserved":
				reserved += qty
			case "paid":
				paid += qty
			}
			id := item + "." + strconv.Itoa(j)
			user := "u" + strconv.Itoa(j%5000)
			fields = append(fields, id, fmt.Sprintf("%s|%d|250|%s|%d|%d", user, qty, status, now, now+600000))
			if len(fields) == 2000 {
				pipe.HSet(ctx, k.Orders(), fields...)
				fields = make([]any, 0, 2000)
			}
			rows = append(rows, []any{id, item, user, qty, int64(250), status, time.UnixMilli(now), time.UnixMilli(now)})
		}
		if len(fields) > 0 {
			pipe.HSet(ctx, k.Orders(), fields...)
		}
		total := reserved + paid + 1000
		pipe.HSet(ctx, k.Hash(), "name", item, "stock_total", total, "stock_left", 1000,
			"reserved", reserved, "paid", paid, "seq", per, "version", 1)
		pipe.SAdd(ctx, keys.Catalog(), item)
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := db.Exec(ctx, `INSERT INTO items (id, name, stock_total) VALUES ($1, $1, $2)`, item, total); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := db.CopyFrom(ctx, pgx.Identifier{"orders"},
		[]string{"id", "item_id", "user_id", "quantity", "price_cents", "status", "created_at", "updated_at"},
		pgx.CopyFromRows(rows)); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(ctx, `ANALYZE orders`); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d orders over %d items in %s", per*benchItems, benchItems, time.Since(start).Round(time.Millisecond))
	return seeded{rdb, keys, db, rec, per * benchItems}
}

// BenchmarkBatch measures a full batch (lock, run record, first pass over every order of both
// sides, confirm) over the seeded orders, and reports rows compared per second.
// The baseline, BenchmarkReadBoth, only reads the same rows from both sides.
func BenchmarkBatch(b *testing.B) {
	s := seed(b, benchOrders())
	r := reconcile.New(s.rdb, s.keys, s.rec, options.Reconcile(reconcile.Options{}))
	b.ResetTimer()
	var rows int
	for i := 0; i < b.N; i++ {
		rep, err := r.Batch(context.Background(), reconcile.BatchOptions{})
		if err != nil || !rep.Clean() || rep.Orders != s.n {
			b.Fatalf("batch: %v %+v", err, rep)
		}
		rows = rep.RowsCompared
	}
	b.StopTimer()
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(s.n), "orders")
}

// BenchmarkReadBoth is the baseline: HSCAN every item's orders and SELECT them from
// Postgres, with no comparison, locking or recording.
func BenchmarkReadBoth(b *testing.B) {
	s := seed(b, benchOrders())
	ctx := context.Background()
	b.ResetTimer()
	var rows int
	for i := 0; i < b.N; i++ {
		rows = 0
		for j := 0; j < benchItems; j++ {
			item := fmt.Sprintf("it%03d", j)
			var cursor uint64
			for {
				kv, next, err := s.rdb.HScan(ctx, s.keys.Item(item).Orders(), cursor, "", 5000).Result()
				if err != nil {
					b.Fatal(err)
				}
				rows += len(kv) / 2
				if cursor = next; cursor == 0 {
					break
				}
			}
			pr, err := s.db.Query(ctx, `SELECT id, user_id, quantity, status FROM orders WHERE item_id = $1`, item)
			if err != nil {
				b.Fatal(err)
			}
			for pr.Next() {
				rows++
			}
			pr.Close()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
