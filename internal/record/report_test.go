package record_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// saleEvents builds the events of one item's sale in stream order: each call is the item's
// next outbox entry, at t0 plus the given offset.
type saleEvents struct {
	item string
	seq  int
	evs  []events.Event
}

func (s *saleEvents) add(typ string, at time.Duration, mod func(*events.Event)) {
	s.seq++
	e := events.Event{EventID: events.ItemEventID(s.item, fmt.Sprintf("%d-0", s.seq)), Type: typ,
		At: t0.Add(at), ItemID: s.item}
	if mod != nil {
		mod(&e)
	}
	s.evs = append(s.evs, e)
}

func (s *saleEvents) order(typ string, at time.Duration, n int, user string, qty int64, payment string) {
	s.add(typ, at, func(e *events.Event) {
		e.OrderID, e.UserID, e.Quantity, e.PriceCents = fmt.Sprintf("%s.%d", s.item, n), user, i64(qty), i64(500)
		e.PaymentID = payment
	})
}

func (s *saleEvents) queue(typ string, at time.Duration, user string) {
	s.add(typ, at, func(e *events.Event) { e.UserID = user })
}

func (s *saleEvents) upsert(at time.Duration, stock int64, starts time.Time) {
	s.add(events.ItemUpserted, at, func(e *events.Event) {
		ends := starts.Add(time.Hour)
		e.Name, e.Category, e.PriceCents, e.StockTotal, e.PerUserLimit = "Item "+s.item, "c", i64(500), i64(stock), i64(2)
		e.StartsAt, e.EndsAt = &starts, &ends
	})
}

// TestSalesReport: a sale recorded through the writer, from its events, gives the report's
// figures as counted by hand: the funnel, money, refusals, peak, sell-out, waits and fairness;
// the filter selects items by sale window and by id; the CSV carries the same figures.
func TestSalesReport(t *testing.T) {
	dsn := testenv.Postgres(t)
	db, err := record.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s, err := db.DB(); err == nil {
			s.Close()
		}
	})
	q, err := record.OpenQueries(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	ctx := context.Background()
	s := time.Second
	ms := time.Millisecond

	a := &saleEvents{item: "a"}
	a.upsert(-time.Minute, 3, t0)
	a.queue(events.QueueJoined, -10*s, "u1") // before the start: both count as joining at t0
	a.queue(events.QueueJoined, -5*s, "u2")
	a.queue(events.QueueAdmitted, 1*s, "u2")
	a.queue(events.QueueAdmitted, 1*s, "u1")
	a.order(events.OrderReserved, 1200*ms, 1, "u1", 1, "")
	a.order(events.OrderReserved, 1500*ms, 2, "u2", 2, "") // nothing free
	a.queue(events.QueueJoined, 2*s, "u3")
	a.order(events.OrderPaid, 2*s, 1, "u1", 1, "p1")
	a.queue(events.QueueJoined, 3*s, "u4")
	a.order(events.OrderExpired, 3*s, 2, "u2", 2, "") // 2 free again
	a.queue(events.QueueAdmitted, 4*s, "u4")          // u4 joined after u3, admitted first
	a.queue(events.QueueJoined, 4500*ms, "u2")        // joins again: still one shopper
	a.queue(events.QueueAdmitted, 5*s, "u3")
	a.order(events.OrderReserved, 5500*ms, 3, "u3", 2, "") // nothing free
	a.order(events.OrderPaid, 6*s, 3, "u3", 2, "p3")
	a.add(events.StockAdjusted, 7*s, func(e *events.Event) { e.Delta, e.StockTotal = i64(1), i64(4) })
	a.order(events.OrderReserved, 8*s, 4, "u4", 1, "")
	a.order(events.OrderCancelled, 9*s, 4, "u4", 1, "")
	a.order(events.OrderReserved, 10*s, 5, "u5", 1, "") // sold out for good
	a.order(events.PaymentRefunded, 11*s, 1, "u1", 1, "p1")
	a.add(events.SaleTally, 1*s, func(e *events.Event) { e.Outcomes = map[string]int64{"reserved": 2, "sold_out": 3} })
	a.add(events.SaleTally, 2*s, func(e *events.Event) {
		e.Outcomes = map[string]int64{"sold_out": 1, "queue_required": 2, "rate_limited": 1, "limit_exceeded": 4,
			"sale_not_started": 5, "sale_ended": 6}
	})

	b := &saleEvents{item: "b"}
	b.upsert(-time.Minute, 7, t0.Add(2*time.Hour))

	w := record.NewWriter(db)
	// Out of order and twice: the record, and so the report, ends the same.
	all := append(append([]events.Event{}, b.evs...), a.evs...)
	for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
		all[i], all[j] = all[j], all[i]
	}
	for range 2 {
		if _, err := w.Apply(ctx, msgs(t, all...)); err != nil {
			t.Fatal(err)
		}
	}

	from, to := t0, t0.Add(30*time.Minute)
	rep, err := q.SalesReport(ctx, record.SalesFilter{From: &from, To: &to})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Items) != 1 || rep.Items[0].ItemID != "a" {
		t.Fatalf("items whose window meets [t0, t0+30m]: %+v, want only a", rep.Items)
	}
	got := rep.Items[0]
	want := record.ItemSales{ItemID: "a", Name: "Item a", StartsAt: t0, StockTotal: 4, SoldUnits: 3,
		RevenueCents: 1500, RefundedCents: 500, PeakPurchasesPerSecond: 2}
	ends := t0.Add(time.Hour)
	want.EndsAt = &ends
	sellOut, p50, p99 := 10.0, 1.0, 2.94
	want.SellOutSeconds, want.WaitSeconds.P50, want.WaitSeconds.P99 = &sellOut, &p50, &p99
	want.Funnel.Joined, want.Funnel.Admitted, want.Funnel.Reserved, want.Funnel.Paid = 4, 4, 5, 2
	want.Funnel.Expired, want.Funnel.Cancelled, want.Funnel.Refunded = 1, 1, 1
	want.Refused.SoldOut, want.Refused.QueueRequired, want.Refused.RateLimited = 4, 2, 1
	want.Refused.LimitExceeded, want.Refused.SaleNotStarted, want.Refused.SaleEnded = 4, 5, 6
	want.Fairness.FIFOInversions = 1
	if d := diffSales(got, want); d != "" {
		t.Errorf("report of a: %s", d)
	}

	rep, err = q.SalesReport(ctx, record.SalesFilter{Item: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Items) != 1 || rep.Items[0].ItemID != "b" || rep.Items[0].SellOutSeconds != nil ||
		rep.Items[0].Funnel.Reserved != 0 || rep.Items[0].WaitSeconds.P50 != nil || rep.Items[0].StockTotal != 7 {
		t.Errorf("report of b (nothing sold): %+v", rep.Items)
	}

	all2, err := q.SalesReport(ctx, record.SalesFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := all2.WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("CSV of two items: %d rows, want header and two", len(rows))
	}
	cell := func(row int, col string) string {
		for i, c := range rows[0] {
			if c == col {
				return rows[row][i]
			}
		}
		t.Fatalf("CSV has no column %s: %v", col, rows[0])
		return ""
	}
	for col, v := range map[string]string{"item_id": "a", "sell_out_seconds": "10", "funnel_paid": "2",
		"refused_sold_out": "4", "wait_seconds_p99": "2.94", "fairness_fifo_inversions": "1", "revenue_cents": "1500"} {
		if got := cell(1, col); got != v {
			t.Errorf("CSV row a, %s = %q, want %q", col, got, v)
		}
	}
	if got := cell(2, "sell_out_seconds"); got != "" {
		t.Errorf("CSV row b, sell_out_seconds = %q, want empty (never sold out)", got)
	}
}

func diffSales(got, want record.ItemSales) string {
	f := func(p *float64) string {
		if p == nil {
			return "nil"
		}
		return fmt.Sprintf("%.4f", *p)
	}
	t := func(p *time.Time) string {
		if p == nil {
			return "nil"
		}
		return p.UTC().Format(time.RFC3339Nano)
	}
	g := fmt.Sprintf("%s %s %s %s %d %d %d %d %+v %+v %d %s %s %s %d", got.ItemID, got.Name, got.StartsAt.Format(time.RFC3339Nano),
		t(got.EndsAt), got.StockTotal, got.SoldUnits, got.RevenueCents, got.RefundedCents, got.Funnel, got.Refused,
		got.PeakPurchasesPerSecond, f(got.SellOutSeconds), f(got.WaitSeconds.P50), f(got.WaitSeconds.P99), got.Fairness.FIFOInversions)
	w := fmt.Sprintf("%s %s %s %s %d %d %d %d %+v %+v %d %s %s %s %d", want.ItemID, want.Name, want.StartsAt.Format(time.RFC3339Nano),
		t(want.EndsAt), want.StockTotal, want.SoldUnits, want.RevenueCents, want.RefundedCents, want.Funnel, want.Refused,
		want.PeakPurchasesPerSecond, f(want.SellOutSeconds), f(want.WaitSeconds.P50), f(want.WaitSeconds.P99), want.Fairness.FIFOInversions)
	if g != w {
		return fmt.Sprintf("\n got %s\nwant %s", g, w)
	}
	return ""
}

// TestInversions counts pairs out of order, ties not counted.
func TestInversions(t *testing.T) {
	for _, c := range []struct {
		in   []int64
		want int64
	}{{nil, 0}, {[]int64{1}, 0}, {[]int64{1, 2, 3}, 0}, {[]int64{3, 2, 1}, 3}, {[]int64{2, 2, 1}, 2},
		{[]int64{1, 3, 2, 4, 0}, 5}} {
		if got := record.Inversions(append([]int64(nil), c.in...)); got != c.want {
			t.Errorf("Inversions(%v) = %d, want %d", c.in, got, c.want)
		}
	}
}
