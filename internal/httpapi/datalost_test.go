package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/flashsale/flashsale/internal/datamark"
	"github.com/flashsale/flashsale/internal/record"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// While Redis has lost its data every change answers 503 "restore needed" and changes
// nothing, /readyz names the reason, the stats carry it for the admin pages' banner, and reads
// and logins go on; the restore's fresh markers end it.
func TestChangesRefusedWhileRedisLostItsData(t *testing.T) {
	ctx := context.Background()
	a := newTestAPI(t, nil)
	q, err := record.OpenQueries(testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	keeper := datamark.NewKeeper(a.rdb, a.keys, q)
	watch := a.app.DataMarks()
	a.item("lost1", 10, 5)
	if err := keeper.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := watch.Check(ctx); err != nil {
		t.Fatal(err)
	}
	buyer := a.token("u1")
	if r := a.do("POST", "/api/items/lost1/purchase", buyer, map[string]any{"quantity": 1}); r.Status != http.StatusCreated {
		t.Fatalf("purchase before the loss: %d %s", r.Status, r.Raw)
	}

	// The loss: every key of this api's prefix goes (its own prefix on the shared server).
	testenv.DeletePrefix(t, a.rdb, a.keys.Prefix)
	a.item("lost1", 10, 5) // an admin re-creates it before anyone noticed
	if err := watch.Check(ctx); err != nil {
		t.Fatal(err)
	}
	left := func() string { v, _ := a.rdb.HGet(ctx, a.keys.Item("lost1").Hash(), "stock_left").Result(); return v }
	before := left()

	r := a.do("GET", "/readyz", "", nil)
	msg, _ := r.Body["error"].(map[string]any)["message"].(string)
	if r.Status != http.StatusServiceUnavailable || r.code() != "unavailable" || !strings.HasPrefix(msg, "redis_data_lost: ") {
		t.Fatalf("/readyz: %d %s", r.Status, r.Raw)
	}
	changes := []struct{ method, path, token string }{
		{"POST", "/api/items/lost1/purchase", buyer},
		{"POST", "/api/orders/lost1.1/pay", buyer},
		{"POST", "/api/orders/lost1.1/cancel", buyer},
		{"POST", "/api/items/lost1/rating", buyer},
		{"PUT", "/api/admin/items/lost2", testAdminToken},
		{"POST", "/api/admin/items/lost1/stock", testAdminToken},
		{"POST", "/api/payments/webhook", ""},
	}
	for _, c := range changes {
		r := a.do(c.method, c.path, c.token, map[string]any{"quantity": 1})
		m, _ := r.Body["error"].(map[string]any)["message"].(string)
		if r.Status != http.StatusServiceUnavailable || r.code() != "unavailable" || !strings.HasPrefix(m, "restore needed") ||
			!strings.Contains(m, "nothing was changed") {
			t.Errorf("%s %s while lost: %d %s", c.method, c.path, r.Status, r.Raw)
		}
	}
	if got := left(); got != before {
		t.Fatalf("stock_left moved from %s to %s while changes were refused", before, got)
	}
	if r := a.do("GET", "/api/items/lost1", "", nil); r.Status != http.StatusOK {
		t.Fatalf("reads go on: %d %s", r.Status, r.Raw)
	}
	st := a.do("GET", "/api/admin/stats?seconds=1", testAdminToken, nil)
	if s, _ := st.Body["redis_data_lost"].(string); !strings.HasPrefix(s, "redis_data_lost: ") {
		t.Fatalf("stats for the banner: %s", st.Raw)
	}
	wantMetric(t, a, "flashsale_redis_data_lost 1")

	if err := keeper.Restored(ctx); err != nil { // what `reconciler restore --all` ends with
		t.Fatal(err)
	}
	if err := watch.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if r := a.do("GET", "/readyz", "", nil); r.Status != http.StatusOK {
		t.Fatalf("/readyz after the restore: %d %s", r.Status, r.Raw)
	}
	if r := a.do("POST", "/api/items/lost1/purchase", buyer, map[string]any{"quantity": 1}); r.Status != http.StatusCreated {
		t.Fatalf("purchase after the restore: %d %s", r.Status, r.Raw)
	}
	if st := a.do("GET", "/api/admin/stats?seconds=1", testAdminToken, nil); st.Body["redis_data_lost"] != nil {
		t.Fatalf("stats after the restore: %s", st.Raw)
	}
	wantMetric(t, a, "flashsale_redis_data_lost 0")
}

func wantMetric(t *testing.T, a *testAPI, line string) {
	t.Helper()
	r := a.do("GET", "/metrics", "", nil)
	if !strings.Contains(r.Raw, "\n"+line+"\n") {
		t.Fatalf("/metrics has no %q", line)
	}
}
