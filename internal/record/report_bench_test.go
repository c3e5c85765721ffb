package record_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// reportBenchOrders is the orders BenchmarkSalesReport loads (FLASHSALE_BENCH_REPORT_ORDERS
// overrides; the default is the size the report is measured at in docs/performance.md).
func reportBenchOrders() int {
	if n, err := strconv.Atoi(os.Getenv("FLASHSALE_BENCH_REPORT_ORDERS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

// loadSale fills a throw-away record by COPY with a finished sale of n orders over 20 items, one
// an hour, each sold out: 85% paid (1 in 50 refunded), 10% expired, 5% cancelled, with movements
// and payments; five items have a waiting room (1.2 joins per order); each item has two apis'
// sale.tally rows per second sold.
func loadSale(tb testing.TB, dsn string, n int) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	const items = 20
	start := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	per := n / items
	var itemRows [][]any
	for i := range items {
		st := start.Add(time.Duration(i) * time.Hour)
		itemRows = append(itemRows, []any{fmt.Sprintf("item%02d", i), "Item", "c", int64(1999), int64(per),
			int64(2), st, st.Add(time.Hour), st.Add(-time.Hour)})
	}
	copyRows := func(table string, cols []string, rows pgx.CopyFromSource) {
		if _, err := conn.CopyFrom(ctx, pgx.Identifier{table}, cols, rows); err != nil {
			tb.Fatalf("COPY %s: %v", table, err)
		}
	}
	copyRows("items", []string{"id", "name", "category", "price_cents", "stock_total", "per_user_limit",
		"starts_at", "ends_at", "created_at"}, pgx.CopyFromRows(itemRows))

	// Order i of an item is reserved i*3 ms after the start (about 333 a second), paid or
	// returned a minute later.
	at := func(i int) (string, time.Time) {
		item := i % items
		k := i / items
		return fmt.Sprintf("item%02d", item), start.Add(time.Duration(item)*time.Hour + time.Duration(k)*3*time.Millisecond)
	}
	status := func(i int) string {
		switch r := (i / items) % 20; {
		case r < 17:
			return "paid"
		case r < 19:
			return "expired"
		default:
			return "cancelled"
		}
	}
	i := 0
	copyRows("orders", []string{"id", "item_id", "user_id", "quantity", "price_cents", "status", "created_at", "updated_at"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if i >= n {
				return nil, nil
			}
			item, t := at(i)
			row := []any{item + "." + strconv.Itoa(i+1), item, "u" + strconv.Itoa(i%50000), int64(1), int64(1999),
				status(i), t, t.Add(time.Minute)}
			i++
			return row, nil
		}))
	i = 0
	returned := false
	copyRows("stock_movements", []string{"event_id", "item_id", "kind", "delta", "order_id", "at"},
		pgx.CopyFromFunc(func() ([]any, error) {
			for i < n {
				item, t := at(i)
				id := item + "." + strconv.Itoa(i+1)
				if !returned {
					returned = true
					return []any{id + "/r", item, "reserved", int64(-1), id, t}, nil
				}
				returned = false
				i++
				if s := status(i - 1); s != "paid" {
					return []any{id + "/x", item, "returned", int64(1), id, t.Add(time.Minute)}, nil
				}
			}
			return nil, nil
		}))
	i = 0
	copyRows("payments", []string{"id", "order_id", "provider", "amount_cents", "status", "refunded_cents", "created_at", "updated_at"},
		pgx.CopyFromFunc(func() ([]any, error) {
			for i < n {
				item, t := at(i)
				i++
				if status(i-1) != "paid" {
					continue
				}
				st, refunded := "succeeded", int64(0)
				if (i/items)%50 == 0 {
					st, refunded = "refunded", 1999
				}
				return []any{"cs_" + strconv.Itoa(i), item + "." + strconv.Itoa(i), "sim", int64(1999), st, refunded,
					t.Add(time.Minute), t.Add(time.Minute)}, nil
			}
			return nil, nil
		}))
	j, joiners := 0, per*6/5
	copyRows("queue_entries", []string{"item_id", "user_id", "joined_at", "admitted_at"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if j >= 5*joiners {
				return nil, nil
			}
			item, k := j/joiners, j%joiners
			st := start.Add(time.Duration(item) * time.Hour)
			joined := st.Add(time.Duration(k-joiners/2) * time.Millisecond)
			var admitted any
			if k < per {
				admitted = st.Add(time.Duration(k)*3*time.Millisecond + time.Duration(k%7)*time.Millisecond)
			}
			j++
			return []any{fmt.Sprintf("item%02d", item), "u" + strconv.Itoa(k), joined, admitted}, nil
		}))
	var tallies [][]any
	secs := per*3/1000 + 1
	for item := range items {
		st := start.Add(time.Duration(item) * time.Hour)
		for s := range secs {
			for inst := range 2 {
				tallies = append(tallies, []any{fmt.Sprintf("item%02d/%d-%d", item, s, inst), fmt.Sprintf("item%02d", item),
					st.Add(time.Duration(s) * time.Second), int64(166), int64(300), int64(20), int64(15), int64(0), int64(0), int64(3)})
			}
		}
	}
	copyRows("sale_tallies", []string{"event_id", "item_id", "at", "reserved", "sold_out", "limit_exceeded",
		"rate_limited", "sale_not_started", "sale_ended", "queue_required"}, pgx.CopyFromRows(tallies))
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkSalesReport times the post-sale report over every item of a sale of
// reportBenchOrders orders, against a bare aggregate over the same orders (Scan: one pass,
// count and sum per item) measured in the same run.
func BenchmarkSalesReport(b *testing.B) {
	dsn := testenv.Postgres(b)
	n := reportBenchOrders()
	t0 := time.Now()
	loadSale(b, dsn, n)
	b.Logf("loaded %d orders by COPY in %v", n, time.Since(t0).Round(time.Millisecond))
	q, err := record.OpenQueries(dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	rep, err := q.SalesReport(ctx, record.SalesFilter{})
	if err != nil {
		b.Fatal(err)
	}
	if len(rep.Items) != 20 || rep.Items[0].Funnel.Reserved != int64(n/20) || rep.Items[0].SellOutSeconds != nil {
		b.Fatalf("report of the loaded sale: %+v", rep.Items[0])
	}
	b.Run("Report", func(b *testing.B) {
		for b.Loop() {
			if _, err := q.SalesReport(ctx, record.SalesFilter{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Scan", func(b *testing.B) {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close(ctx)
		for b.Loop() {
			rows, err := conn.Query(ctx, `SELECT item_id, count(*), sum(quantity * price_cents) FROM orders GROUP BY item_id`)
			if err != nil {
				b.Fatal(err)
			}
			rows.Close()
			if rows.Err() != nil {
				b.Fatal(rows.Err())
			}
		}
	})
}
