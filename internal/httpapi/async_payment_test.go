package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/paysim"
)

// hookGate stands between the simulator and the api's webhook: it forwards every delivery,
// except those of the event types it holds, which it answers 503 (the simulator delivers them
// again with backoff) until they are let through. Tests use it to order deliveries.
type hookGate struct {
	srv    *httptest.Server
	mu     sync.Mutex
	target string          // the api's webhook URL
	held   map[string]bool // event type -> answered 503
	passed map[string]int  // event type -> deliveries the api answered 2xx
}

func newHookGate(t *testing.T, held ...string) *hookGate {
	g := &hookGate{held: map[string]bool{}, passed: map[string]int{}}
	for _, typ := range held {
		g.held[typ] = true
	}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *hookGate) url() string { return g.srv.URL + "/hook" }

func (g *hookGate) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var ev struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &ev)
	g.mu.Lock()
	target, held := g.target, g.held[ev.Type]
	g.mu.Unlock()
	if held || target == "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, target, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", r.Header.Get("Stripe-Signature"))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	res.Body.Close()
	if res.StatusCode/100 == 2 {
		g.mu.Lock()
		g.passed[ev.Type]++
		g.mu.Unlock()
	}
	w.WriteHeader(res.StatusCode)
}

// release lets the deliveries of typ through from now on.
func (g *hookGate) release(typ string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.held, typ)
}

// applied is how many deliveries of typ the api answered 2xx.
func (g *hookGate) applied(typ string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.passed[typ]
}

// newGatedPayAPI is newPayAPI with the simulator's webhooks going through g.
func newGatedPayAPI(t *testing.T, g *hookGate, simCfg paysim.Config, tweak func(*config.Config)) *payAPI {
	simCfg.WebhookURL = g.url()
	a := newPayAPI(t, simCfg, pollable(tweak))
	g.mu.Lock()
	g.target = a.url + "/api/payments/webhook"
	g.mu.Unlock()
	return a
}

// pollable lifts the per-user read limit, which the tests' polling of an order would hit.
func pollable(tweak func(*config.Config)) func(*config.Config) {
	return func(c *config.Config) {
		c.LimitReads = config.Limit{}
		if tweak != nil {
			tweak(c)
		}
	}
}

// TestAsyncPaymentFailure: a debit failing after processing leaves the order reserved with
// payment_status failed, and the next checkout opens a new session the shopper pays. A late
// payment_intent.processing does not bring processing back: the order is not held, and cancel
// is not refused.
func TestAsyncPaymentFailure(t *testing.T) {
	g := newHookGate(t, "payment_intent.processing")
	a := newGatedPayAPI(t, g, paysim.Config{AsyncDelay: 300 * time.Millisecond, Chaos: paysim.Chaos{Duplicates: 2}}, nil)
	a.item("af", 10, 5)
	o := a.reserve("af", "alice")
	p := a.checkout("alice", o)
	first := p["id"].(string)
	a.pay(p["checkout_url"].(string), paysim.CardAsyncFail)
	waitFor(t, "the failed debit", 30*time.Second, func() bool {
		return g.applied("checkout.session.async_payment_failed") > 0 && g.applied("payment_intent.payment_failed") > 0
	})
	g.release("payment_intent.processing")
	waitFor(t, "the late processing event", 30*time.Second, func() bool { return g.applied("payment_intent.processing") > 0 })
	a.delivered()
	if st, s := a.paymentStatus("alice", o), a.status("alice", o); st != "failed" || s != "reserved" {
		t.Fatalf("after a failed debit and a late processing event: payment_status %s, status %s", st, s)
	}
	again := a.checkout("alice", o)
	if again["id"] == first || again["status"] != "open" {
		t.Fatalf("checkout after a failed debit answered %v (the failed session was %s)", again, first)
	}
	a.pay(again["checkout_url"].(string), paysim.CardVisa)
	waitFor(t, "the order to be paid", 30*time.Second, func() bool { return a.status("alice", o) == "paid" })
	a.delivered()
	n, pay := a.outboxTypes("af")
	if n["order.paid"] != 1 || pay[again["id"].(string)] != "order.paid" || n["payment.refunded"] != 0 {
		t.Fatalf("events %v, payments %v", n, pay)
	}

	// A second order: the same failure, then the shopper cancels instead (no hold is left).
	o2 := a.reserve("af", "bob")
	p2 := a.checkout("bob", o2)
	a.pay(p2["checkout_url"].(string), paysim.CardAsyncFail)
	waitFor(t, "payment_status failed", 30*time.Second, func() bool { return a.paymentStatus("bob", o2) == "failed" })
	a.delivered()
	if r := a.do("POST", "/api/orders/"+o2+"/cancel", a.token("bob"), nil); r.Status != 200 {
		t.Fatalf("cancel after a failed debit: %d %s", r.Status, r.Raw)
	}
}

// TestProcessingHoldStartsAtEitherEvent: the hold on a reservation starts at whichever of
// checkout.session.completed (payment_status unpaid) and payment_intent.processing the api
// gets first, the other one (and duplicates) changing nothing: while the debit is on its way
// the order stays reserved past expires_at and cancel answers 409 payment_processing.
func TestProcessingHoldStartsAtEitherEvent(t *testing.T) {
	for _, first := range []string{"checkout.session.completed", "payment_intent.processing"} {
		t.Run(first, func(t *testing.T) {
			other := "payment_intent.processing"
			if first == other {
				other = "checkout.session.completed"
			}
			g := newHookGate(t, other, "payment_intent.succeeded", "checkout.session.async_payment_succeeded")
			a := newGatedPayAPI(t, g, paysim.Config{AsyncDelay: 2 * time.Second, Chaos: paysim.Chaos{Duplicates: 3}}, func(c *config.Config) {
				c.ReservationTTL = 3 * time.Second
				c.Payment.ProcessingHold = time.Minute
			})
			a.item("he", 10, 5)
			o := a.reserve("he", "alice")
			r := a.do("GET", "/api/orders/"+o, a.token("alice"), nil)
			expires, err := time.Parse(time.RFC3339Nano, r.Body["order"].(map[string]any)["expires_at"].(string))
			if err != nil {
				t.Fatal(err)
			}
			p := a.checkout("alice", o)
			a.pay(p["checkout_url"].(string), paysim.CardAsync)
			waitFor(t, "payment_status processing", 10*time.Second, func() bool { return a.paymentStatus("alice", o) == "processing" })
			if g.applied(other) != 0 {
				t.Fatalf("%s was applied though held", other)
			}
			// Past expires_at, with the provider's decision held back: still reserved.
			waitFor(t, "expires_at to pass", 10*time.Second, func() bool { return time.Now().After(expires.Add(500 * time.Millisecond)) })
			g.release(other)
			waitFor(t, "the other event", 30*time.Second, func() bool { return g.applied(other) > 0 })
			if s, st := a.status("alice", o), a.paymentStatus("alice", o); s != "reserved" || st != "processing" {
				t.Fatalf("past expires_at while processing: %s, payment_status %s", s, st)
			}
			if r := a.do("POST", "/api/orders/"+o+"/cancel", a.token("alice"), nil); r.Status != 409 || r.code() != "payment_processing" {
				t.Fatalf("cancel while processing: %d %s", r.Status, r.Raw)
			}
			g.release("payment_intent.succeeded")
			g.release("checkout.session.async_payment_succeeded")
			waitFor(t, "the order to be paid", 30*time.Second, func() bool { return a.status("alice", o) == "paid" })
			a.delivered()
			n, _ := a.outboxTypes("he")
			if n["order.paid"] != 1 || n["order.expired"] != 0 || n["payment.refunded"] != 0 {
				t.Fatalf("events %v", n)
			}
		})
	}
}

// TestProcessingFailsPastExpiry: a debit submitted shortly before the reservation ends holds
// it past expires_at; when the debit then fails, the hold ends and the order expires at once
// (its stock returns), not at the end of the hold; the shopper cannot start a new attempt.
func TestProcessingFailsPastExpiry(t *testing.T) {
	// The debit fails 6 s after it is submitted, 3 s after the reservation's end at the earliest.
	a := newPayAPI(t, paysim.Config{AsyncDelay: 6 * time.Second}, pollable(func(c *config.Config) {
		c.ReservationTTL = 3 * time.Second
		c.Payment.ProcessingHold = 10 * time.Minute
	}))
	a.item("fe", 10, 5)
	o := a.reserve("fe", "alice")
	p := a.checkout("alice", o)
	a.pay(p["checkout_url"].(string), paysim.CardAsyncFail)
	waitFor(t, "payment_status processing", 10*time.Second, func() bool { return a.paymentStatus("alice", o) == "processing" })
	r := a.do("GET", "/api/orders/"+o, a.token("alice"), nil)
	expires, err := time.Parse(time.RFC3339Nano, r.Body["order"].(map[string]any)["expires_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "expires_at to pass", 10*time.Second, func() bool { return time.Now().After(expires.Add(300 * time.Millisecond)) })
	if s, st := a.status("alice", o), a.paymentStatus("alice", o); s != "reserved" || st != "processing" {
		t.Fatalf("past expires_at while processing: %s, payment_status %s", s, st)
	}
	if r := a.do("POST", "/api/orders/"+o+"/cancel", a.token("alice"), nil); r.Status != 409 || r.code() != "payment_processing" {
		t.Fatalf("cancel while processing: %d %s", r.Status, r.Raw)
	}
	// The hold is ten minutes: the order expires within seconds of the failure, or not at all here.
	waitFor(t, "the order to expire after the failed debit", 20*time.Second, func() bool { return a.status("alice", o) == "expired" })
	if st := a.paymentStatus("alice", o); st != "failed" {
		t.Fatalf("payment_status %s after the failed debit", st)
	}
	if left := a.stockLeft("fe"); left != 10 {
		t.Fatalf("stock_left %d after the expiry, want 10", left)
	}
	if r := a.do("POST", "/api/orders/"+o+"/checkout", a.token("alice"), nil); r.Status != 409 {
		t.Fatalf("checkout of the expired order: %d %s", r.Status, r.Raw)
	}
	a.delivered()
	if n, _ := a.outboxTypes("fe"); n["order.expired"] != 1 || n["order.paid"] != 0 || n["payment.refunded"] != 0 {
		t.Fatalf("events %v", n)
	}
}
