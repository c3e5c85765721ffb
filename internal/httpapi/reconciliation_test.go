package httpapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
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
	rep, err := reconcile.New(a.rdb, a.keys, db, options.Reconcile(reconcile.Options{})).Batch(context.Background(), reconcile.BatchOptions{})
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

// The runs' history: empty before any run, newest first with drift counted, limit honoured,
// bad parameters 400 (nothing read), admin only, 503 while Postgres is unreachable.
func TestReconciliationRuns(t *testing.T) {
	a := newTestAPI(t, nil)
	dsn := testenv.Postgres(t)
	db, err := record.OpenQueries(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a.srv = httpapi.New(httpapi.Deps{Options: app.HTTPOptions(a.cfg), Auth: a.auth, Inventory: a.inv, Orders: a.ord,
		ReconcileRuns: db.RecentRunsReport})
	runs := func(path string) []any {
		t.Helper()
		r := a.do("GET", path, testAdminToken, nil)
		list, ok := r.Body["runs"].([]any)
		if r.Status != http.StatusOK || !ok {
			t.Fatalf("%s: %d %s", path, r.Status, r.Raw)
		}
		return list
	}
	if got := runs("/api/admin/reconciliation/runs"); len(got) != 0 {
		t.Fatalf("before any run: %v", got)
	}
	rep, err := reconcile.New(a.rdb, a.keys, db, options.Reconcile(reconcile.Options{})).Batch(context.Background(), reconcile.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A run that found drift, as a runner stores it.
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `INSERT INTO reconciliation_runs (started_at, finished_at, status, fencing_token, drift)
		VALUES (now(), now(), 'drift', 1000000, '{"drift": [{"kind": "order_status"}, {"kind": "rating"}], "unverified": [{"item_id": "x"}]}')`); err != nil {
		t.Fatal(err)
	}
	got := runs("/api/admin/reconciliation/runs")
	if len(got) != 2 {
		t.Fatalf("after two runs: %v", got)
	}
	newest, older := got[0].(map[string]any), got[1].(map[string]any)
	if newest["status"] != "drift" || newest["drift"] != float64(2) || newest["unverified"] != float64(1) ||
		older["id"] != float64(rep.RunID) || older["status"] != "ok" || older["drift"] != float64(0) || older["finished_at"] == nil {
		t.Fatalf("runs: %v", got)
	}
	if got := runs("/api/admin/reconciliation/runs?limit=1"); len(got) != 1 || got[0].(map[string]any)["status"] != "drift" {
		t.Fatalf("limit=1: %v", got)
	}
	for _, q := range []string{"?limit=0", "?limit=101", "?limit=x", "?limit=1&limit=2", "?since=1"} {
		if r := a.do("GET", "/api/admin/reconciliation/runs"+q, testAdminToken, nil); r.Status != http.StatusBadRequest || r.code() != "invalid_request" {
			t.Errorf("%s: %d %s", q, r.Status, r.Raw)
		}
	}
	if r := a.do("GET", "/api/admin/reconciliation/runs", a.token("alice"), nil); r.Status != http.StatusForbidden {
		t.Fatalf("shopper: %d %s", r.Status, r.Raw)
	}

	down, err := record.OpenQueries("postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	a.srv = httpapi.New(httpapi.Deps{Options: app.HTTPOptions(a.cfg), Auth: a.auth, ReconcileRuns: down.RecentRunsReport})
	if r := a.do("GET", "/api/admin/reconciliation/runs", testAdminToken, nil); r.Status != http.StatusServiceUnavailable || r.code() != "unavailable" {
		t.Fatalf("postgres down: %d %s", r.Status, r.Raw)
	}
}
