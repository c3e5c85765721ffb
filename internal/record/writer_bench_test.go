package record_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// BenchmarkWriter measures the Writer alone (no Kafka) on new order.reserved events in batches
// of 1000, beside pgx CopyFrom of the same rows in the same run: the orders rows alone
// (cmd/bench's baseline) and all the Writer's rows in one transaction per batch.
// Run: FLASHSALE_BENCH_EVENTS=50000 go test -run '^$' -bench Writer -benchtime 1x ./internal/record/
func BenchmarkWriter(b *testing.B) {
	n := benchEvents() * 10
	const batch = 1000
	dsn := testenv.Postgres(b)
	db, err := record.Open(dsn)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE copy_orders (LIKE orders INCLUDING ALL);
		CREATE TABLE copy_processed (LIKE processed_events INCLUDING ALL);
		CREATE TABLE copy_orders3 (LIKE orders INCLUDING ALL);
		CREATE TABLE copy_movements (LIKE stock_movements INCLUDING ALL)`); err != nil {
		b.Fatal(err)
	}
	at := time.Now().UTC().Truncate(time.Millisecond)
	one, price := int64(1), int64(100)
	msgs := make([]kafka.Message, n)
	pe, ord, mv := make([][]any, n), make([][]any, n), make([][]any, n)
	for i := range msgs {
		e := events.Event{EventID: fmt.Sprintf("rec/%d-%d", at.UnixMilli(), i), Type: events.OrderReserved, At: at,
			ItemID: "rec", OrderID: fmt.Sprintf("rec.%d", i+1), UserID: fmt.Sprintf("u%d", i%20000),
			Quantity: &one, PriceCents: &price}
		v, err := json.Marshal(e)
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = kafka.Message{Topic: "flashsale.orders", Offset: int64(i), Key: []byte("rec"), Value: v}
		pe[i] = []any{e.EventID, e.Type, int32(0), int64(i), at}
		ord[i] = []any{e.OrderID, e.ItemID, e.UserID, one, price, "reserved", at, at}
		mv[i] = []any{e.EventID, e.ItemID, "reserved", int64(-1), e.OrderID, at}
	}
	w := record.NewWriter(db)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		if _, err := conn.Exec(ctx, `TRUNCATE processed_events, orders, stock_movements, copy_orders, copy_processed, copy_orders3, copy_movements`); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		// Interleaved batch by batch, so a busy machine slows all three alike.
		var rec, cp1, cp3 time.Duration
		for i := 0; i < n; i += batch {
			j := min(n, i+batch)
			start := time.Now()
			res, err := w.Apply(ctx, msgs[i:j])
			if err != nil {
				b.Fatal(err)
			}
			if res.Applied != j-i {
				b.Fatalf("applied %d of %d", res.Applied, j-i)
			}
			rec += time.Since(start)
			start = time.Now()
			if _, err := conn.CopyFrom(ctx, pgx.Identifier{"copy_orders"}, orderCols, pgx.CopyFromRows(ord[i:j])); err != nil {
				b.Fatal(err)
			}
			cp1 += time.Since(start)
			start = time.Now()
			err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.CopyFrom(ctx, pgx.Identifier{"copy_processed"}, processedCols, pgx.CopyFromRows(pe[i:j])); err != nil {
					return err
				}
				if _, err := tx.CopyFrom(ctx, pgx.Identifier{"copy_orders3"}, orderCols, pgx.CopyFromRows(ord[i:j])); err != nil {
					return err
				}
				_, err := tx.CopyFrom(ctx, pgx.Identifier{"copy_movements"}, movementCols, pgx.CopyFromRows(mv[i:j]))
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			cp3 += time.Since(start)
		}
		rate := func(d time.Duration) float64 { return float64(n) / d.Seconds() }
		b.ReportMetric(rate(rec), "writer_events/s")
		b.ReportMetric(rate(cp1), "copy_orders_rows/s")
		b.ReportMetric(rate(cp3), "copy_all_events/s")
		b.ReportMetric(cp1.Seconds()/rec.Seconds(), "ratio_vs_orders_copy")
		b.ReportMetric(cp3.Seconds()/rec.Seconds(), "ratio_vs_all_copy")
	}
}

var (
	orderCols     = []string{"id", "item_id", "user_id", "quantity", "price_cents", "status", "created_at", "updated_at"}
	processedCols = []string{"event_id", "type", "kafka_partition", "kafka_offset", "processed_at"}
	movementCols  = []string{"event_id", "item_id", "kind", "delta", "order_id", "at"}
)
