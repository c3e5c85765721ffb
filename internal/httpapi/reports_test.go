package httpapi_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// The sales report route: JSON, or CSV on Accept: text/csv, filtered by window and item; bad
// parameters 400; admin only; 503 while Postgres is unreachable. (The figures themselves are
// record.TestSalesReport's.)
func TestSalesReportRoute(t *testing.T) {
	a := newTestAPI(t, nil)
	dsn := testenv.Postgres(t)
	q, err := record.OpenQueries(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	db, err := record.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := db.DB(); err == nil {
		defer s.Close()
	}
	start := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	var msgs []kafka.Message
	for i, id := range []string{"early", "late"} {
		st, end := start.Add(time.Duration(i)*24*time.Hour), start.Add(time.Duration(i)*24*time.Hour+time.Hour)
		one := int64(1)
		stock := int64(5)
		for _, e := range []events.Event{
			{EventID: id + "/1-0", Type: events.ItemUpserted, At: st, ItemID: id, Name: "=" + id, PriceCents: &stock,
				StockTotal: &stock, PerUserLimit: &one, StartsAt: &st, EndsAt: &end},
			{EventID: id + "/2-0", Type: events.OrderReserved, At: st.Add(time.Second), ItemID: id, OrderID: id + ".1",
				UserID: "u", Quantity: &one, PriceCents: &stock},
			{EventID: id + "/3-0", Type: events.SaleTally, At: st.Add(time.Second), ItemID: id,
				Outcomes: map[string]int64{"sold_out": 7}},
		} {
			b, _ := json.Marshal(e)
			msgs = append(msgs, kafka.Message{Value: b, Offset: int64(len(msgs))})
		}
	}
	if _, err := record.NewWriter(db).Apply(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	a.srv = httpapi.New(httpapi.Deps{Options: app.HTTPOptions(a.cfg), Auth: a.auth, Inventory: a.inv, Orders: a.ord,
		SalesReport: q.SalesReport})

	const path = "/api/admin/reports/sales"
	if r := a.do("GET", path, a.token("alice"), nil); r.Status != http.StatusForbidden {
		t.Fatalf("shopper: %d %s", r.Status, r.Raw)
	}
	ids := func(r map[string]any) []string {
		var out []string
		items, _ := r["items"].([]any)
		for _, it := range items {
			m, _ := it.(map[string]any)
			id, _ := m["item_id"].(string)
			out = append(out, id)
		}
		return out
	}
	r := a.do("GET", path, testAdminToken, nil)
	if r.Status != http.StatusOK || strings.Join(ids(r.Body), ",") != "early,late" || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("all: %d %v %s", r.Status, r.Header, r.Raw)
	}
	item := r.Body["items"].([]any)[0].(map[string]any)
	if item["funnel"].(map[string]any)["reserved"] != 1.0 || item["refused"].(map[string]any)["sold_out"] != 7.0 ||
		item["sell_out_seconds"] != nil || item["fairness"].(map[string]any)["fifo_inversions"] != 0.0 {
		t.Errorf("early: %s", r.Raw)
	}
	r = a.do("GET", path+"?from=2026-11-21T00:00:00Z", testAdminToken, nil)
	if r.Status != http.StatusOK || strings.Join(ids(r.Body), ",") != "late" {
		t.Errorf("from the 21st: %d %s", r.Status, r.Raw)
	}
	r = a.do("GET", path+"?to=2026-11-20T10:30:00Z&from=2026-11-20T10:10:00Z", testAdminToken, nil)
	if r.Status != http.StatusOK || strings.Join(ids(r.Body), ",") != "early" {
		t.Errorf("inside early's window: %d %s", r.Status, r.Raw)
	}
	r = a.do("GET", path+"?item=late", testAdminToken, nil)
	if r.Status != http.StatusOK || strings.Join(ids(r.Body), ",") != "late" {
		t.Errorf("item=late: %d %s", r.Status, r.Raw)
	}
	r = a.do("GET", path+"?item=nothing", testAdminToken, nil)
	if r.Status != http.StatusOK || r.Raw != `{"items":[]}` {
		t.Errorf("unknown item: %d %s", r.Status, r.Raw)
	}

	r = a.do("GET", path, testAdminToken, nil, "Accept", "text/csv")
	rows, err := csv.NewReader(strings.NewReader(r.Raw)).ReadAll()
	if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/csv") || err != nil || len(rows) != 3 ||
		rows[0][0] != "item_id" || rows[1][0] != "early" || rows[1][1] != "'=early" {
		t.Fatalf("CSV: %d %v %v %q", r.Status, r.Header, err, r.Raw)
	}
	if r := a.do("GET", path, testAdminToken, nil, "Accept", "application/json, text/csv"); !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		t.Errorf("JSON first: %v", r.Header)
	}

	for _, bad := range []string{"?from=yesterday", "?to=2026-11-20", "?item=a%20b", "?limit=3", "?item=a&item=b",
		"?from=2026-11-21T00:00:00Z&to=2026-11-20T00:00:00Z"} {
		if r := a.do("GET", path+bad, testAdminToken, nil); r.Status != http.StatusBadRequest || r.code() != "invalid_request" {
			t.Errorf("%s: %d %s", bad, r.Status, r.Raw)
		}
	}

	down, err := record.OpenQueries("postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	a.srv = httpapi.New(httpapi.Deps{Options: app.HTTPOptions(a.cfg), Auth: a.auth, SalesReport: down.SalesReport})
	if r := a.do("GET", path, testAdminToken, nil); r.Status != http.StatusServiceUnavailable || r.code() != "unavailable" {
		t.Fatalf("postgres down: %d %s", r.Status, r.Raw)
	}
}
