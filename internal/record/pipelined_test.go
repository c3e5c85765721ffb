package record_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/segmentio/kafka-go"
	"gorm.io/gorm"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// reservations are n order.reserved events of item "a" (orders a.1..a.n) from stream entry
// <first>-0 on, with some paid (every fifth) in the same stream.
func reservations(t testing.TB, first, n int) []kafka.Message {
	var evs []events.Event
	for i := first; i < first+n; i++ {
		oid := fmt.Sprintf("a.%d", i)
		evs = append(evs, ev(events.OrderReserved, int64(10*i), func(e *events.Event) { e.OrderID = oid }))
		if i%5 == 0 {
			evs = append(evs, ev(events.OrderPaid, int64(10*i+1), func(e *events.Event) { e.OrderID = oid }))
		}
	}
	m := msgs(t, evs...)
	for i := range m {
		m[i].Offset = int64(first*2 + i)
	}
	return m
}

// TestApplyPipelinedExactlyOnce: the one-round-trip write path under what the consumer meets:
// duplicates in a batch, batches re-delivered whole or overlapping (the fast path fails on a
// unique violation, the merge path takes over), poison mid-batch, two writers at once (a
// rebalance). Each event applies once over all writers; each order and movement is held once.
func TestApplyPipelinedExactlyOnce(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	const n = 1200 // orders; 1440 events with the payments
	all := reservations(t, 1, n)
	poison := kafka.Message{Topic: "t", Partition: 1, Offset: 9999, Value: []byte(`{"event_id":"a/1-0","type":"order.lost"}`)}

	// One batch with its own duplicates and a poison message: applied by the fast path.
	w := record.NewWriter(db)
	first := append(append(append([]kafka.Message{}, all[:300]...), all[100:150]...), poison)
	res, err := w.Apply(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied != 300 || res.Duplicates != 50 || res.Invalid != 1 {
		t.Fatalf("first batch %+v, want 300 applied, 50 duplicates, 1 invalid", res)
	}

	// Two writers (two pools: two reconcilers) race over the rest in overlapping batches,
	// each re-delivering what the other may have applied, and the first batch again.
	var applied int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for k := range 2 {
		wk := record.NewWriter(db)
		if k == 1 {
			wk = record.NewWriter(openSame(t, db))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			batches := [][]kafka.Message{first}
			for lo := 200 + 50*k; lo < len(all); lo += 250 {
				batches = append(batches, all[lo:min(len(all), lo+400)])
			}
			for _, b := range batches {
				r, err := wk.Apply(ctx, b)
				if err != nil {
					t.Errorf("writer %d: %v", k, err)
					return
				}
				mu.Lock()
				applied += r.Applied
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if res.Applied+applied != len(all) {
		t.Fatalf("applied %d events in all, want each of %d once", res.Applied+applied, len(all))
	}
	var orders, paid, moves, processed, dead int64
	db.Model(&record.Order{}).Count(&orders)
	db.Model(&record.Order{}).Where("status = 'paid'").Count(&paid)
	db.Model(&record.StockMovement{}).Count(&moves)
	db.Model(&record.ProcessedEvent{}).Count(&processed)
	db.Model(&record.DeadLetter{}).Count(&dead)
	if orders != n || paid != n/5 || moves != n || processed != int64(len(all)) || dead != 1 {
		t.Fatalf("orders %d (want %d), paid %d (want %d), movements %d (want %d), processed %d (want %d), dead letters %d (want 1)",
			orders, n, paid, n/5, moves, n, processed, len(all), dead)
	}
}

// TestApplyLeavesConnectionIdle: a batch the fast path refuses (a unique violation) or that
// Postgres refuses whole (a NUL in a name) leaves the pooled connection out of any
// transaction: on a pool of one connection, the next batch and a plain query work, and the
// refused batch left nothing behind.
func TestApplyLeavesConnectionIdle(t *testing.T) {
	db := openDB(t)
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(1)
	w := record.NewWriter(db)
	ctx := context.Background()
	batch := reservations(t, 1, 20)
	if _, err := w.Apply(ctx, batch); err != nil {
		t.Fatal(err)
	}
	// Re-delivered with new events: the fast path fails, the merge path applies the new ones.
	res, err := w.Apply(ctx, append(batch[10:], reservations(t, 21, 5)...))
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied != 6 || res.Duplicates != len(batch)-10 {
		t.Fatalf("re-delivery %+v, want 6 applied and %d duplicates", res, len(batch)-10)
	}
	// Refused whole: nothing of it is written.
	refused := append(reservations(t, 100, 3), msgs(t, ev(events.ItemUpserted, 5000, func(e *events.Event) { e.Name = "a\x00b" }))...)
	if _, err := w.Apply(ctx, refused); err == nil {
		t.Fatal("Apply took a NUL in a name: the test's premise is gone")
	}
	// Outside a transaction block, two statements run in two transactions.
	var x1, x2 int64
	if err := db.Raw("SELECT txid_current()").Scan(&x1).Error; err != nil {
		t.Fatalf("the connection after a refused batch: %v", err)
	}
	if err := db.Raw("SELECT txid_current()").Scan(&x2).Error; err != nil || x1 == x2 {
		t.Fatalf("the connection after a refused batch is still in a transaction (%v)", err)
	}
	res, err = w.Apply(ctx, reservations(t, 200, 4))
	if err != nil || res.Applied != 5 {
		t.Fatalf("the batch after a refused one: %+v, %v", res, err)
	}
	var orders int64
	db.Model(&record.Order{}).Where("id IN ?", []string{"a.100", "a.101", "a.102"}).Count(&orders)
	if orders != 0 {
		t.Fatalf("%d orders of the refused batch were written", orders)
	}
}

// openSame opens a second pool on db's database.
func openSame(t *testing.T, db *gorm.DB) *gorm.DB {
	t.Helper()
	var name string
	if err := db.Raw("SELECT current_database()").Scan(&name).Error; err != nil {
		t.Fatal(err)
	}
	other, err := record.Open(strings.Replace(testenv.PostgresAdminDSN(), "/postgres?", "/"+name+"?", 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s, err := other.DB(); err == nil {
			s.Close()
		}
	})
	return other
}
