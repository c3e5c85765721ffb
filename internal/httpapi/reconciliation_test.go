package httpapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/testenv"
)

// The admin report route: null before any run, the newest run after one, 503 while Postgres
// is unreachable, and admin only.
func TestReconciliationReport(t *testing.T) {
	a := newTestAPI(t, nil)
	db, err := record.OpenQueries(testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a.srv = httpapi.New(httpapi.Deps{Options: app.HTTPOptions(a.cfg), Auth: a.auth, Inventory: a.inv, Orders: a.ord,
		Reconciliation: db.LatestReport})

	if r := a.do("GET", "/api/admin/reconciliation", a.token("alice"), nil); r.Status != http.StatusForbidden {
		t.Fatalf("shopper: %d %s", r.Status, r.Raw)
	}
	r := a.do("GET", "/api/admin/reconciliation", testAdminToken, nil)
	if r.Status != http.StatusOK || r.Body["run"] != nil {
		t.Fatalf("before any run: %d %s", r.Status, r.Raw)
	}
	rep, err := reconcile.New(a.rdb, a.keys, db, reconcile.Options{}).Batch(context.Background(), reconcile.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r = a.do("GET", "/api/admin/reconciliation", testAdminToken, nil)
	run, _ := r.Body["run"].(map[string]any)
	report, _ := run["report"].(map[string]any)
	if r.Status != http.StatusOK || run["id"] != float64(rep.RunID) || run["status"] != "ok" || report == nil || report["drift"] == nil {
		t.Fatalf("after a run: %d %s", r.Status, r.Raw)
	}

	down, err := record.OpenQueries("postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	a.srv = httpapi.New(httpapi.Deps{Options: app.HTTPOptions(a.cfg), Auth: a.auth, Reconciliation: down.LatestReport})
	if r := a.do("GET", "/api/admin/reconciliation", testAdminToken, nil); r.Status != http.StatusServiceUnavailable || r.code() != "unavailable" {
		t.Fatalf("postgres down: %d %s", r.Status, r.Raw)
	}
}
