package record_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"gorm.io/gorm"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

func openDB(t testing.TB) *gorm.DB {
	t.Helper()
	db, err := record.Open(testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s, err := db.DB(); err == nil {
			s.Close()
		}
	})
	return db
}

func i64(v int64) *int64 { return &v }

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// ev builds an event of item "a" at stream entry "<ms>-0".
func ev(typ string, ms int64, mod func(*events.Event)) events.Event {
	e := events.Event{EventID: events.ItemEventID("a", fmt.Sprintf("%d-0", ms)), Type: typ,
		At: t0.Add(time.Duration(ms) * time.Millisecond), ItemID: "a"}
	switch typ {
	case events.ItemUpserted:
		e.Name, e.Category, e.PriceCents, e.StockTotal, e.PerUserLimit = "A", "c", i64(500), i64(10), i64(2)
	case events.StockAdjusted:
		e.Delta, e.StockTotal = i64(5), i64(15)
	case events.RatingSet:
		e.EventID = events.RatingEventID(fmt.Sprintf("%d-0", ms))
		e.UserID, e.Stars = "u", i64(4)
	default:
		e.OrderID, e.UserID, e.Quantity, e.PriceCents = "a.1", "u", i64(2), i64(500)
	}
	if mod != nil {
		mod(&e)
	}
	return e
}

func msgs(t testing.TB, evs ...events.Event) []kafka.Message {
	out := make([]kafka.Message, len(evs))
	for i, e := range evs {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = kafka.Message{Topic: "t", Partition: 0, Offset: int64(i), Key: []byte(e.ItemID), Value: b}
	}
	return out
}

// TestApplyOrderIndependent: whatever order and however often events arrive, the record ends
// the same: status only moves forward, the newest attributes, stock total and stars win.
func TestApplyOrderIndependent(t *testing.T) {
	upsert := ev(events.ItemUpserted, 1, nil)
	rename := ev(events.ItemUpserted, 5, func(e *events.Event) { e.Name = "A2"; e.StockTotal = i64(15) })
	adjust := ev(events.StockAdjusted, 4, nil)
	reserved := ev(events.OrderReserved, 2, nil)
	paid := ev(events.OrderPaid, 3, nil)
	rate1 := ev(events.RatingSet, 6, func(e *events.Event) { e.Stars = i64(2) })
	rate2 := ev(events.RatingSet, 7, func(e *events.Event) { e.Stars = i64(5) })
	cases := map[string][][]events.Event{
		"in order, one batch":        {{upsert, reserved, paid, adjust, rename, rate1, rate2}},
		"reversed, one batch":        {{rate2, rate1, rename, adjust, paid, reserved, upsert}},
		"reversed, one per batch":    {{rate2}, {rate1}, {rename}, {adjust}, {paid}, {reserved}, {upsert}},
		"late reserved, re-delivery": {{upsert, paid, adjust, rename}, {reserved, paid, rate2}, {reserved, rate1, upsert}},
		"duplicates in a batch":      {{upsert, upsert, reserved, paid, paid, adjust, rename, rate1, rate2, rate2}},
	}
	for name, batches := range cases {
		t.Run(name, func(t *testing.T) {
			db := openDB(t)
			w := record.NewWriter(db)
			ctx := context.Background()
			applied := 0
			for _, b := range batches {
				res, err := w.Apply(ctx, msgs(t, b...))
				if err != nil {
					t.Fatal(err)
				}
				applied += res.Applied
			}
			if applied != 7 {
				t.Fatalf("applied %d events, want 7 (each exactly once)", applied)
			}
			var it record.Item
			var o record.Order
			var r record.Rating
			var moves []record.StockMovement
			db.First(&it, "id = ?", "a")
			db.First(&o, "id = ?", "a.1")
			db.First(&r, "item_id = ? AND user_id = ?", "a", "u")
			db.Order("event_id").Find(&moves)
			if it.Name != "A2" || it.StockTotal != 15 || it.PerUserLimit != 2 || it.PriceCents != 500 {
				t.Errorf("item %+v", it)
			}
			if o.Status != "paid" || o.Quantity != 2 || o.UserID != "u" || !o.CreatedAt.Equal(reserved.At) || !o.UpdatedAt.Equal(paid.At) {
				t.Errorf("order %+v", o)
			}
			if r.Stars != 5 {
				t.Errorf("rating %+v", r)
			}
			if len(moves) != 2 || moves[0].Kind != "reserved" || moves[0].Delta != -2 || moves[1].Kind != "adjusted" || moves[1].Delta != 5 {
				t.Errorf("movements %+v", moves)
			}
		})
	}
}

// TestApplyTerminalStatuses: each terminal status wins over reserved, and a cancel or expiry
// returns stock as a movement.
func TestApplyTerminalStatuses(t *testing.T) {
	db := openDB(t)
	w := record.NewWriter(db)
	ctx := context.Background()
	var batch []events.Event
	for i, typ := range []string{events.OrderPaid, events.OrderCancelled, events.OrderExpired} {
		oid := fmt.Sprintf("a.%d", i+1)
		at := int64(10 * (i + 1))
		batch = append(batch,
			ev(typ, at+1, func(e *events.Event) { e.OrderID = oid }),
			ev(events.OrderReserved, at, func(e *events.Event) { e.OrderID = oid }))
	}
	if _, err := w.Apply(ctx, msgs(t, batch...)); err != nil {
		t.Fatal(err)
	}
	var got []record.Order
	db.Order("id").Find(&got)
	want := []string{"paid", "cancelled", "expired"}
	for i, o := range got {
		if o.Status != want[i] {
			t.Errorf("%s: %s, want %s", o.ID, o.Status, want[i])
		}
	}
	var sum int64
	db.Model(&record.StockMovement{}).Select("coalesce(sum(delta), 0)").Scan(&sum)
	if sum != -2 { // three reservations of 2, two returned
		t.Fatalf("sum of movements %d, want -2", sum)
	}
}

// TestApplyParksPoison: malformed and invalid messages go to dead_letters, once per offset,
// and the valid events of the same batch are applied.
func TestApplyParksPoison(t *testing.T) {
	db := openDB(t)
	w := record.NewWriter(db)
	ctx := context.Background()
	good := msgs(t, ev(events.ItemUpserted, 1, nil), ev(events.OrderReserved, 2, nil))
	bad := []kafka.Message{
		{Value: []byte("not json")},
		{Value: []byte(`{"event_id":"a/3-0","type":"order.teleported","at":"2026-11-22T10:00:00Z","item_id":"a"}`)},
		{Value: []byte(`{"event_id":"a/4-0","type":"order.paid","at":"2026-11-22T10:00:00Z","item_id":"a","order_id":"b.1","user_id":"u","quantity":1,"price_cents":1}`)},
		{Value: []byte(`{"event_id":"nope","type":"rating.set","at":"2026-11-22T10:00:00Z","item_id":"a","user_id":"u","stars":3}`)},
		{Value: []byte(`{"event_id":"rating:5-0","type":"rating.set","at":"2026-11-22T10:00:00Z","item_id":"a","user_id":"u","stars":9}`)},
	}
	for i := range bad {
		bad[i].Topic, bad[i].Partition, bad[i].Offset = "t", 1, int64(100+i)
	}
	batch := append(append([]kafka.Message{}, bad[:3]...), good[0], bad[3], good[1], bad[4])
	for range 2 { // re-delivered: parked once
		res, err := w.Apply(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		if res.Invalid != 5 {
			t.Fatalf("invalid %d, want 5", res.Invalid)
		}
	}
	var dead, orders int64
	db.Model(&record.DeadLetter{}).Count(&dead)
	db.Model(&record.Order{}).Count(&orders)
	if dead != 5 || orders != 1 {
		t.Fatalf("dead letters %d (want 5), orders %d (want 1)", dead, orders)
	}
}

// TestApplyFallsBackOnConflict: a batch the fast path (COPY straight into the tables) cannot
// take, because one event was applied before or one order already exists, is written by the
// merge path instead, and whatever the fast path had written of it is gone: each event is
// applied once and each order and movement appears once.
func TestApplyFallsBackOnConflict(t *testing.T) {
	db := openDB(t)
	w := record.NewWriter(db)
	ctx := context.Background()
	order := func(typ string, ms int64, n int) events.Event {
		return ev(typ, ms, func(e *events.Event) { e.OrderID = fmt.Sprintf("a.%d", n) })
	}
	// Order 1 paid before its reservation arrives; order 2 applied once already.
	first := []events.Event{order(events.OrderPaid, 2, 1), order(events.OrderReserved, 3, 2)}
	if _, err := w.Apply(ctx, msgs(t, first...)); err != nil {
		t.Fatal(err)
	}
	var batch []events.Event
	for i := 3; i < 50; i++ {
		batch = append(batch, order(events.OrderReserved, int64(10+i), i))
	}
	// First a new event whose order exists (fast path fails on orders), then the same batch
	// again plus an event applied before (fast path fails on processed_events).
	res, err := w.Apply(ctx, msgs(t, append(batch, order(events.OrderReserved, 1, 1))...))
	if err != nil {
		t.Fatal(err)
	}
	if want := (record.Result{Applied: len(batch) + 1}); res != want {
		t.Fatalf("late reservation: %+v, want %+v", res, want)
	}
	res, err = w.Apply(ctx, msgs(t, append(batch, first[1], order(events.OrderPaid, 60, 3))...))
	if err != nil {
		t.Fatal(err)
	}
	if want := (record.Result{Applied: 1, Duplicates: len(batch) + 1}); res != want {
		t.Fatalf("re-delivery: %+v, want %+v", res, want)
	}
	var orders, moves, processed int64
	db.Model(&record.Order{}).Count(&orders)
	db.Model(&record.StockMovement{}).Count(&moves)
	db.Model(&record.ProcessedEvent{}).Count(&processed)
	if orders != 49 || moves != 49 || processed != 51 {
		t.Fatalf("orders %d (want 49), movements %d (want 49), processed events %d (want 51)", orders, moves, processed)
	}
	var o1, o3 record.Order
	db.First(&o1, "id = ?", "a.1")
	db.First(&o3, "id = ?", "a.3")
	if o1.Status != "paid" || o3.Status != "paid" {
		t.Fatalf("orders a.1 %s (paid before its late reservation), a.3 %s: want both paid", o1.Status, o3.Status)
	}
}

// TestApplyIsolatingParksWhatPostgresRefuses: an event Postgres refuses for its data (a NUL in
// a name: "invalid byte sequence for encoding UTF8: 0x00") fails the whole batch under Apply;
// ApplyIsolating splits the batch until the event stands alone, parks it with Postgres's
// reason (made storable) and applies every other event. A re-delivery changes nothing more.
func TestApplyIsolatingParksWhatPostgresRefuses(t *testing.T) {
	db := openDB(t)
	w := record.NewWriter(db)
	ctx := context.Background()
	var evs []events.Event
	for i := range 9 {
		item := fmt.Sprintf("i%d", i)
		evs = append(evs, ev(events.ItemUpserted, int64(10+i), func(e *events.Event) {
			e.ItemID, e.EventID = item, events.ItemEventID(item, fmt.Sprintf("%d-0", 10+i))
			if i == 4 || i == 7 {
				e.Name = "a\x00b"
			}
		}))
	}
	batch := msgs(t, evs...)
	if _, err := w.Apply(ctx, batch); err == nil {
		t.Fatal("Apply took a NUL in a name: the test's premise is gone")
	}
	for range 2 {
		res, err := w.ApplyIsolating(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		if res.Invalid != 2 {
			t.Fatalf("result %+v, want 2 parked", res)
		}
	}
	var items, dead int64
	db.Model(&record.Item{}).Count(&items)
	db.Model(&record.DeadLetter{}).Count(&dead)
	if items != 7 || dead != 2 {
		t.Fatalf("%d items (want 7), %d dead letters (want 2)", items, dead)
	}
	var d record.DeadLetter
	db.Where("kafka_offset = ?", 4).First(&d)
	if !strings.Contains(d.Error, "0x00") || !bytes.Equal(d.Value, batch[4].Value) {
		t.Fatalf("dead letter %+v: want Postgres's reason and the message", d)
	}
}

// TestApplyIsolatingParksUnstorableTextWhateverTheBatch: an event with a NUL in its text is
// parked even when a newer event of the same row in its batch would have hidden it from
// Postgres (the batch folds them into one row), so parking does not depend on the batching.
func TestApplyIsolatingParksUnstorableTextWhateverTheBatch(t *testing.T) {
	db := openDB(t)
	w := record.NewWriter(db)
	older := ev(events.ItemUpserted, 1, func(e *events.Event) { e.Name = "a\x00b" })
	newer := ev(events.ItemUpserted, 2, func(e *events.Event) { e.Name = "Fine" })
	res, err := w.ApplyIsolating(context.Background(), msgs(t, older, newer))
	if err != nil || res.Invalid != 1 || res.Applied != 1 {
		t.Fatalf("result %+v, %v; want the NUL event parked and the other applied", res, err)
	}
	var it record.Item
	var dead int64
	db.First(&it, "id = ?", "a")
	db.Model(&record.DeadLetter{}).Count(&dead)
	if it.Name != "Fine" || dead != 1 {
		t.Fatalf("item %+v, %d dead letters; want the newer name and one dead letter", it, dead)
	}
}

// TestApplyPayments: order.paid with a payment id records a succeeded payment, payment.refunded
// a refunded one; in whatever order and however often they arrive, a refund stays a refund.
func TestApplyPayments(t *testing.T) {
	reserved1 := ev(events.OrderReserved, 1, nil)
	paid := ev(events.OrderPaid, 2, func(e *events.Event) { e.PaymentID = "pi_paid" })
	reserved2 := ev(events.OrderReserved, 3, func(e *events.Event) { e.OrderID = "a.2"; e.Quantity = i64(1) })
	expired := ev(events.OrderExpired, 4, func(e *events.Event) { e.OrderID = "a.2"; e.Quantity = i64(1) })
	refunded := ev(events.PaymentRefunded, 5, func(e *events.Event) { e.OrderID = "a.2"; e.Quantity = i64(1); e.PaymentID = "pi_late" })
	for _, order := range [][]events.Event{
		{reserved1, paid, reserved2, expired, refunded},
		{refunded, expired, paid, reserved2, reserved1, refunded, paid},
	} {
		db := openDB(t)
		w := record.NewWriter(db)
		for _, e := range order {
			if _, err := w.Apply(context.Background(), msgs(t, e)); err != nil {
				t.Fatal(err)
			}
		}
		var rows []struct {
			ID, OrderID, Provider, Status string
			AmountCents, RefundedCents    int64
		}
		if err := db.Raw(`SELECT id, order_id, provider, status, amount_cents, refunded_cents FROM payments ORDER BY id`).Scan(&rows).Error; err != nil {
			t.Fatal(err)
		}
		want := `[{pi_late a.2 sim refunded 500 500} {pi_paid a.1 sim succeeded 1000 0}]`
		if got := fmt.Sprint(rows); got != want {
			t.Fatalf("payments %s, want %s", got, want)
		}
		var status string
		db.Raw(`SELECT status FROM orders WHERE id = 'a.2'`).Scan(&status)
		if status != "expired" {
			t.Fatalf("the refunded payment's order is %q", status)
		}
	}
}

// TestPaymentIssues: the payments check finds a succeeded payment whose order is not paid and
// an order two payments paid, and nothing in a record that adds up.
func TestPaymentIssues(t *testing.T) {
	dsn := testenv.Postgres(t)
	db, err := record.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s, _ := db.DB(); s.Close() }()
	q, err := record.OpenQueries(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	w := record.NewWriter(db)
	_, err = w.Apply(ctx, msgs(t,
		ev(events.OrderReserved, 1, nil),
		ev(events.OrderPaid, 2, func(e *events.Event) { e.PaymentID = "pi_paid" }),
		ev(events.OrderReserved, 3, func(e *events.Event) { e.OrderID = "a.2" }),
		ev(events.OrderExpired, 4, func(e *events.Event) { e.OrderID = "a.2" }),
		ev(events.PaymentRefunded, 5, func(e *events.Event) { e.OrderID = "a.2"; e.PaymentID = "pi_late" }),
		ev(events.OrderReserved, 6, func(e *events.Event) { e.OrderID = "a.3" }),
		ev(events.OrderExpired, 7, func(e *events.Event) { e.OrderID = "a.3" }),
	))
	if err != nil {
		t.Fatal(err)
	}
	issues, checked, err := q.PaymentIssues(ctx)
	if err != nil || len(issues) != 0 || checked != 2 {
		t.Fatalf("a record that adds up: %d checked, issues %+v, %v", checked, issues, err)
	}
	// What no event stream can write: a success for an expired order, a second for a paid one.
	if err := db.Exec(`INSERT INTO payments (id, order_id, provider, amount_cents, status, created_at, updated_at) VALUES
		('pi_lost', 'a.3', 'sim', 1000, 'succeeded', now(), now()), ('pi_twice', 'a.1', 'sim', 1000, 'succeeded', now(), now())`).Error; err != nil {
		t.Fatal(err)
	}
	issues, checked, err = q.PaymentIssues(ctx)
	if err != nil || checked != 4 {
		t.Fatal(checked, err)
	}
	if got := fmt.Sprintf("%+v", issues); got != `[{PaymentID: OrderID:a.1 Status:succeeded OrderStatus: Payments:2} {PaymentID:pi_lost OrderID:a.3 Status:succeeded OrderStatus:expired Payments:1}]` {
		t.Fatalf("issues %s", got)
	}
}

// TestApplyRefundsAndDisputes: order.refunded makes a paid order refunded (whatever the order
// the events come in: refunded only follows paid), with its restocked units and its payment
// refunded in full; a partial payment.refunded and payment.disputed leave the order paid and
// record the amount and the dispute.
func TestApplyRefundsAndDisputes(t *testing.T) {
	reserved := ev(events.OrderReserved, 1, nil)
	paid := ev(events.OrderPaid, 2, func(e *events.Event) { e.PaymentID, e.PaymentIntent, e.Attempt = "cs_1", "pi_1", "fsa_1" })
	refunded := ev(events.OrderRefunded, 3, func(e *events.Event) {
		e.PaymentID, e.PaymentIntent, e.RefundedCents, e.Delta = "cs_1", "pi_1", i64(1000), i64(2)
	})
	reserved2 := ev(events.OrderReserved, 4, func(e *events.Event) { e.OrderID = "a.2" })
	paid2 := ev(events.OrderPaid, 5, func(e *events.Event) { e.OrderID = "a.2"; e.PaymentID = "cs_2" })
	partial := ev(events.PaymentRefunded, 6, func(e *events.Event) {
		e.OrderID, e.PaymentID, e.PaymentIntent, e.RefundedCents = "a.2", "cs_2", "pi_2", i64(300)
	})
	disputed := ev(events.PaymentDisputed, 7, func(e *events.Event) {
		e.OrderID, e.PaymentID, e.PaymentIntent = "a.2", "cs_2", "pi_2"
	})
	for _, order := range [][]events.Event{
		{reserved, paid, refunded, reserved2, paid2, partial, disputed},
		{refunded, disputed, partial, paid, reserved, paid2, reserved2, refunded, paid},
	} {
		dsn := testenv.Postgres(t)
		db, err := record.Open(dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { s, _ := db.DB(); s.Close() }()
		w := record.NewWriter(db)
		for _, e := range order {
			if _, err := w.Apply(context.Background(), msgs(t, e)); err != nil {
				t.Fatal(err)
			}
		}
		var orders []struct {
			ID, Status string
			Restocked  int64
		}
		if err := db.Raw(`SELECT id, status, restocked FROM orders ORDER BY id`).Scan(&orders).Error; err != nil {
			t.Fatal(err)
		}
		if got, want := fmt.Sprint(orders), `[{a.1 refunded 2} {a.2 paid 0}]`; got != want {
			t.Fatalf("orders %s, want %s", got, want)
		}
		var pays []struct {
			ID, Status, PaymentIntent, Attempt string
			RefundedCents                      int64
			Disputed                           bool
		}
		if err := db.Raw(`SELECT id, status, payment_intent, COALESCE(attempt, '') AS attempt, refunded_cents, disputed_at IS NOT NULL AS disputed FROM payments ORDER BY id`).Scan(&pays).Error; err != nil {
			t.Fatal(err)
		}
		if got, want := fmt.Sprint(pays), `[{cs_1 refunded pi_1 fsa_1 1000 false} {cs_2 succeeded pi_2  300 true}]`; got != want {
			t.Fatalf("payments %s, want %s", got, want)
		}
		q, err := record.OpenQueries(dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		issues, _, err := q.PaymentIssues(context.Background())
		if err != nil || len(issues) != 0 {
			t.Fatalf("payment issues %v, %v", issues, err)
		}
		ds, err := q.Disputes(context.Background(), 10)
		if err != nil || len(ds) != 1 || ds[0].OrderID != "a.2" || *ds[0].PaymentIntent != "pi_2" || *ds[0].OrderStatus != "paid" {
			t.Fatalf("disputes %+v, %v", ds, err)
		}
	}
}
