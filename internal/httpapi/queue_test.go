package httpapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/metrics"
)

// queuedItem creates an item with a waiting room through the admin route.
func (a *testAPI) queuedItem(id string, stock int64, ttl int) {
	a.t.Helper()
	r := a.do("PUT", "/api/admin/items/"+id, testAdminToken, map[string]any{
		"name": "Item " + id, "price_cents": 500, "stock": stock, "per_user_limit": 2,
		"queue": map[string]any{"admit_per_second": 1000, "max_active": 100, "pass_ttl_seconds": ttl},
	})
	if r.Status != http.StatusCreated {
		a.t.Fatalf("create %s: %d %s", id, r.Status, r.Raw)
	}
	q, _ := r.Body["item"].(map[string]any)["queue"].(map[string]any)
	if q["max_active"] != float64(100) {
		a.t.Fatalf("the item does not show its waiting room: %s", r.Raw)
	}
}

// admitted joins user and runs admission steps until the ticket holds a pass.
func (a *testAPI) admitted(item, user string) map[string]any {
	a.t.Helper()
	tok := a.token(user)
	if r := a.do("POST", "/api/items/"+item+"/queue", tok, nil); r.Status != 200 {
		a.t.Fatalf("join: %d %s", r.Status, r.Raw)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		a.q.Tick(context.Background())
		r := a.do("GET", "/api/items/"+item+"/queue", tok, nil)
		if r.Status == http.StatusTooManyRequests { // the per-shopper read limit: wait it out
			time.Sleep(100 * time.Millisecond)
			continue
		}
		tk := r.Body["ticket"].(map[string]any)
		if tk["state"] == "admitted" {
			return tk
		}
		time.Sleep(5 * time.Millisecond) // the rate's bucket fills with time; the loop waits on the state
	}
	a.t.Fatalf("%s was never admitted", user)
	return nil
}

func purchaseCalls() float64 {
	return testutil.ToFloat64(metrics.ScriptCalls.WithLabelValues("purchase", "ok"))
}

// TestQueueRoutes: the waiting room's contract over HTTP: join, poll, no_queue, not_found,
// and a pass that buys once.
func TestQueueRoutes(t *testing.T) {
	a := newTestAPI(t, nil)
	a.item("plain", 5, 5)
	a.queuedItem("wr", 5, 60)
	tok := a.token("alice")
	if r := a.do("POST", "/api/items/plain/queue", tok, nil); r.Status != 409 || r.code() != "no_queue" {
		t.Errorf("join without a waiting room: %d %s", r.Status, r.Raw)
	}
	if r := a.do("POST", "/api/items/nope/queue", tok, nil); r.Status != 404 {
		t.Errorf("join an unknown item: %d %s", r.Status, r.Raw)
	}
	if r := a.do("GET", "/api/items/wr/queue", tok, nil); r.Status != 404 || r.code() != "not_found" {
		t.Errorf("poll before joining: %d %s", r.Status, r.Raw)
	}
	if r := a.do("POST", "/api/items/wr/purchase", tok, nil); r.Status != 403 || r.code() != "queue_required" {
		t.Errorf("purchase without a pass: %d %s", r.Status, r.Raw)
	}
	tk := a.admitted("wr", "alice")
	pass := tk["pass"].(string)
	if r := a.do("POST", "/api/items/wr/purchase", tok, nil, "Queue-Pass", pass, "Idempotency-Key", "k1"); r.Status != 201 {
		t.Fatalf("purchase with the pass: %d %s", r.Status, r.Raw)
	}
	// A replay still gets its order; a new purchase with the spent pass does not.
	if r := a.do("POST", "/api/items/wr/purchase", tok, nil, "Queue-Pass", pass, "Idempotency-Key", "k1"); r.Status != 200 {
		t.Errorf("replay after the pass was spent: %d %s", r.Status, r.Raw)
	}
	calls := purchaseCalls()
	if r := a.do("POST", "/api/items/wr/purchase", tok, nil, "Queue-Pass", pass); r.Status != 403 || r.code() != "queue_required" {
		t.Errorf("spent pass: %d %s", r.Status, r.Raw)
	}
	if purchaseCalls() != calls {
		t.Errorf("a spent pass this instance saw spent reached the purchase script")
	}
	if r := a.do("GET", "/api/items/wr/queue", tok, nil); r.Body["ticket"].(map[string]any)["state"] != "spent" {
		t.Errorf("ticket after buying: %s", r.Raw)
	}
	// Another api instance has not seen it spent: its script refuses it, nothing changes.
	b := newTestAPI(t, func(c *config.Config) { c.RedisPrefix = a.keys.Prefix })
	before, _ := a.inv.Get(context.Background(), "wr")
	if r := b.do("POST", "/api/items/wr/purchase", b.token("alice"), nil, "Queue-Pass", pass); r.Status != 403 || r.code() != "queue_required" {
		t.Errorf("spent pass on another instance: %d %s", r.Status, r.Raw)
	}
	if after, _ := a.inv.Get(context.Background(), "wr"); after.StockLeft != before.StockLeft {
		t.Errorf("a spent pass took stock: %d -> %d", before.StockLeft, after.StockLeft)
	}
}

// TestBadPassesNeverReachTheScript: forged, expired, another shopper's and another item's
// passes are 403 queue_required, answered before the purchase script runs.
func TestBadPassesNeverReachTheScript(t *testing.T) {
	a := newTestAPI(t, nil)
	a.queuedItem("one", 10, 1)
	a.queuedItem("two", 10, 60)
	bob := a.admitted("one", "bob")["pass"].(string)
	carolTwo := a.admitted("two", "carol")["pass"].(string)
	tok := a.token("carol")
	forged := []byte(carolTwo)
	forged[len(forged)-3] ^= 1
	cases := map[string]string{
		"forged":        string(forged),
		"garbage":       "not-a-pass",
		"another user":  bob,
		"another item":  carolTwo,
		"for no one at": "",
	}
	calls := purchaseCalls()
	for name, pass := range cases {
		r := a.do("POST", "/api/items/one/purchase", tok, nil, "Queue-Pass", pass)
		if r.Status != 403 || r.code() != "queue_required" {
			t.Errorf("%s: %d %s", name, r.Status, r.Raw)
		}
	}
	// Bob's own pass lives one second: once his ticket says expired, the pass is refused too.
	deadline := time.Now().Add(10 * time.Second)
	bobTok := a.token("bob")
	for a.do("GET", "/api/items/one/queue", bobTok, nil).Body["ticket"].(map[string]any)["state"] != "expired" {
		if time.Now().After(deadline) {
			t.Fatal("bob's pass never expired")
		}
		// Waiting on the ticket's state, with a deadline; polls without a ticket token are
		// limited per shopper (FLASHSALE_LIMIT_READS, 10 a second), so poll slower than that.
		time.Sleep(150 * time.Millisecond)
	}
	if r := a.do("POST", "/api/items/one/purchase", bobTok, nil, "Queue-Pass", bob); r.Status != 403 || r.code() != "queue_required" {
		t.Errorf("expired pass: %d %s", r.Status, r.Raw)
	}
	// Joining again after an unused pass expired puts bob at the back, waiting.
	a.q.Tick(context.Background())
	if r := a.do("POST", "/api/items/one/queue", bobTok, nil); r.Body["ticket"].(map[string]any)["state"] != "waiting" {
		t.Errorf("join after the pass expired: %s", r.Raw)
	}
	if purchaseCalls() != calls {
		t.Errorf("bad passes reached the purchase script (%v calls)", purchaseCalls()-calls)
	}
	it, _ := a.inv.Get(context.Background(), "one")
	if it.StockLeft != 10 {
		t.Errorf("stock moved: %d", it.StockLeft)
	}
}

// TestSpentPassOfOneItemLeavesAnotherItemsPass: pass ids are numbered per item ("<user>.<n>"),
// so a shopper first in two lines holds a pass with the same id on each. Buying one item
// spends that item's pass only: the other item's pass still buys (it is neither spent nor
// another item's), on the instance that saw the first one spent.
func TestSpentPassOfOneItemLeavesAnotherItemsPass(t *testing.T) {
	a := newTestAPI(t, nil)
	a.queuedItem("one", 5, 60)
	a.queuedItem("two", 5, 60)
	tok := a.token("alice")
	passOne := a.admitted("one", "alice")["pass"].(string)
	passTwo := a.admitted("two", "alice")["pass"].(string)
	if r := a.do("POST", "/api/items/one/purchase", tok, nil, "Queue-Pass", passOne); r.Status != 201 {
		t.Fatalf("buy one with its pass: %d %s", r.Status, r.Raw)
	}
	if r := a.do("POST", "/api/items/two/purchase", tok, nil, "Queue-Pass", passTwo); r.Status != 201 {
		t.Fatalf("buy two with its own, unspent pass after spending one's: %d %s", r.Status, r.Raw)
	}
	// Each pass is still refused where it was spent.
	if r := a.do("POST", "/api/items/two/purchase", tok, nil, "Queue-Pass", passTwo); r.Status != 403 || r.code() != "queue_required" {
		t.Errorf("two's spent pass again: %d %s", r.Status, r.Raw)
	}
}
