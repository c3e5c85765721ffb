package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
)

// importCSV is an import file of n good rows (ids it0..., four categories); stock gives every
// row's stock column.
func importCSV(n int, stock string) string {
	var b strings.Builder
	b.WriteString("id,name,category,price_cents,stock,per_user_limit,starts_at,ends_at\n")
	for i := range n {
		fmt.Fprintf(&b, "it%d,Item %d,cat%d,%d,%s,%d,,\n", i, i, i%4, 100+i, stock, 1+i%5)
	}
	return b.String()
}

// BenchmarkImport: a CSV import of 1,000 and 10,000 rows through the router into an empty
// catalogue (all created) and again (all updated), the snapshot loaded as in a running api.
// Run: go test -run='^$' -bench=Import -benchtime=3x ./internal/httpapi/
func BenchmarkImport(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		body := importCSV(n, "10")
		b.Run(fmt.Sprintf("create/rows=%d", n), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				a := newTestAPI(b, nil)
				a.do("GET", "/api/items", "", nil) // the snapshot a running api keeps
				b.StartTimer()
				importOK(b, a, body, n, 0)
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
		b.Run(fmt.Sprintf("reimport/rows=%d", n), func(b *testing.B) {
			a := newTestAPI(b, nil)
			a.do("GET", "/api/items", "", nil)
			importOK(b, a, body, n, 0)
			b.ResetTimer()
			for b.Loop() {
				importOK(b, a, body, 0, n)
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// importOK imports body and fails unless it created and updated exactly as many rows as said,
// without errors.
func importOK(t testing.TB, a *testAPI, body string, created, updated int) reply {
	t.Helper()
	r := a.do("POST", "/api/admin/items/import", testAdminToken, body, "Content-Type", "text/csv")
	if r.Status != 200 || r.Body["created"] != float64(created) || r.Body["updated"] != float64(updated) ||
		r.Body["failed"] != 0.0 {
		t.Fatalf("import: %d %.300s", r.Status, r.Raw)
	}
	return r
}
