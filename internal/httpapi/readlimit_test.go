package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/inventory"
)

// TestReadsAreLimitedPerUser: order reads and the
// waiting-room polls that must reach Redis are limited per user (FLASHSALE_LIMIT_READS, in the
// api's memory: no Redis call), answered 429 rate_limited with the RateLimit headers and
// Retry-After past the budget; another user keeps theirs, and a poll answered from memory
// (with its ticket token) is never limited.
func TestReadsAreLimitedPerUser(t *testing.T) {
	a := newTestAPI(t, func(c *config.Config) {
		c.LimitReads = config.Limit{Rate: 1, Period: time.Hour, Burst: 4}
	})
	a.item("lamp", 10, 5)
	// A waiting room whose sale starts in an hour: its waiting tickets are answered from memory.
	stock, starts := int64(10), time.Now().Add(time.Hour).UTC()
	if _, _, err := a.inv.Upsert(t.Context(), inventory.Input{ID: "q", Name: "Queued", Category: "c", PriceCents: 100,
		Stock: &stock, PerUserLimit: 1, StartsAt: &starts,
		Queue: &inventory.QueueSettings{AdmitPerSecond: 1, MaxActive: 1, PassTTLSeconds: 60}}); err != nil {
		t.Fatal(err)
	}
	bob := a.token("bob")
	r := a.do("POST", "/api/items/lamp/purchase", bob, nil)
	if r.Status != http.StatusCreated {
		t.Fatalf("purchase: %d %s", r.Status, r.Raw)
	}
	order := r.Body["order"].(map[string]any)["id"].(string)
	joined := a.do("POST", "/api/items/q/queue", bob, nil)
	if joined.Status != http.StatusOK {
		t.Fatalf("join: %d %s", joined.Status, joined.Raw)
	}
	ticket := joined.Body["ticket"].(map[string]any)["token"].(string)

	// Four reads in the budget (two kinds of order read, and a poll without its token)...
	for i, path := range []string{"/api/orders", "/api/orders/" + order, "/api/items/q/queue", "/api/orders"} {
		r := a.do("GET", path, bob, nil)
		if r.Status != http.StatusOK || r.Header.Get("RateLimit-Limit") != "4" {
			t.Fatalf("read %d (%s) in the budget: %d %v %s", i, path, r.Status, r.Header, r.Raw)
		}
	}
	// ...then each of them is refused, with the headers.
	for _, path := range []string{"/api/orders", "/api/orders/" + order, "/api/items/q/queue"} {
		r := a.do("GET", path, bob, nil)
		if r.Status != http.StatusTooManyRequests || r.code() != "rate_limited" {
			t.Fatalf("%s past the budget: %d %s, want 429 rate_limited", path, r.Status, r.Raw)
		}
		if r.Header.Get("Retry-After") == "" || r.Header.Get("RateLimit-Remaining") != "0" || r.Header.Get("RateLimit-Policy") == "" {
			t.Fatalf("%s past the budget: headers %v", path, r.Header)
		}
	}
	// A poll with the ticket's token is answered from memory (this api's view of the line is
	// fresh after an admission step): not limited.
	if _, err := a.q.Admit(t.Context(), "q", starts); err != nil {
		t.Fatal(err)
	}
	if r := a.do("GET", "/api/items/q/queue", bob, nil, "Queue-Ticket", ticket); r.Status != http.StatusOK {
		t.Fatalf("a poll with its token after the budget: %d %s", r.Status, r.Raw)
	}
	// Another shopper has a budget of their own.
	if r := a.do("GET", "/api/orders", a.token("carol"), nil); r.Status != http.StatusOK {
		t.Fatalf("another user's read: %d %s", r.Status, r.Raw)
	}
}
