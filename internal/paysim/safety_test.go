package paysim_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/paysim"
)

// TestAccountsAreApart: a payment is visible only to the key that made it. Another key can
// neither read, confirm, cancel, refund nor list it, nor pre-claim the shop's idempotency keys;
// only the shop's key's objects send webhooks.
func TestAccountsAreApart(t *testing.T) {
	rc := newReceiver(t, "whsec_apart", 0)
	sim := start(t, paysim.Config{APIKey: "sk_test_shop", WebhookURL: rc.url(), WebhookSecrets: []string{"whsec_apart"}})
	u := sim.URL()
	const other = "sk_test_intruder"
	shop := call(t, "POST", u+"/v1/payment_intents", "sk_test_shop", "checkout-a", url.Values{"amount": {"500"}, "currency": {"usd"}}).json(t)
	id := shop["id"].(string)
	// The intruder's payment under the same idempotency key is its own, and sends nothing.
	theirs := call(t, "POST", u+"/v1/payment_intents", other, "checkout-b", url.Values{"amount": {"1"}, "currency": {"usd"}, "confirm": {"true"}, "payment_method": {paysim.CardVisa}})
	if theirs.status != 200 {
		t.Fatalf("intruder's own payment: %d %s", theirs.status, theirs.body)
	}
	if r := call(t, "POST", u+"/v1/payment_intents", "sk_test_shop", "checkout-b", url.Values{"amount": {"700"}, "currency": {"usd"}}); r.status != 200 || r.json(t)["amount"] != 700.0 {
		t.Fatalf("the shop's key checkout-b after the intruder used it: %d %s", r.status, r.body)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/payment_intents/" + id},
		{"POST", "/v1/payment_intents/" + id + "/confirm"},
		{"POST", "/v1/payment_intents/" + id + "/cancel"},
	} {
		form := url.Values{}
		if strings.HasSuffix(c.path, "confirm") {
			form.Set("payment_method", paysim.CardVisa)
		}
		if r := call(t, c.method, u+c.path, other, "", form); r.status != 404 || r.errCode(t) != "resource_missing" {
			t.Errorf("%s %s with another key: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	if r := call(t, "POST", u+"/v1/refunds", other, "", url.Values{"payment_intent": {id}}); r.status != 400 || r.errCode(t) != "resource_missing" {
		t.Errorf("refund with another key: %d %s", r.status, r.body)
	}
	if r := call(t, "GET", u+"/v1/payment_intents", other, "", nil).json(t); len(r["data"].([]any)) != 1 {
		t.Errorf("the intruder lists %d payments, want its one", len(r["data"].([]any)))
	}
	// The shop's payment is untouched and pays; its events, and only its, arrive.
	if r := confirm(t, sim, shop, paysim.CardVisa); r.status != 200 {
		t.Fatalf("shop confirm: %d %s", r.status, r.body)
	}
	waitFor(t, "webhooks", drained(sim))
	for _, g := range rc.accepted("") {
		if g.object["amount"] == 1.0 {
			t.Fatalf("the intruder's payment sent %s to the shop", g.typ)
		}
	}
	if n := len(rc.accepted("payment_intent.succeeded")); n != 1 {
		t.Fatalf("%d succeeded events, want the shop's one", n)
	}
}

// TestMemoryIsBounded: fields over Stripe's limits are refused; past MaxObjects the oldest
// finished payments are evicted (counted), and with none finished creation answers 429.
func TestMemoryIsBounded(t *testing.T) {
	sim := start(t, paysim.Config{MaxObjects: 10})
	u := sim.URL()
	big := url.Values{"amount": {"100"}, "currency": {"usd"}, "description": {strings.Repeat("x", 250<<10)}}
	if r := call(t, "POST", u+"/v1/payment_intents", testKey, "", big); r.status != 400 {
		t.Fatalf("a 250 KiB description: %d %s", r.status, r.body)
	}
	var paid []string
	for i := range 4 { // 4 intents + 4 charges = 8 objects
		pi := createIntent(t, sim, "100", fmt.Sprint("o", i))
		if r := confirm(t, sim, pi, paysim.CardVisa); r.status != 200 {
			t.Fatalf("confirm: %d %s", r.status, r.body)
		}
		paid = append(paid, pi["id"].(string))
	}
	open := []string{createIntent(t, sim, "100", "open1")["id"].(string), createIntent(t, sim, "100", "open2")["id"].(string)}
	st := sim.Stats()
	if st.Objects > 10 || st.Evicted != 1 {
		t.Fatalf("after 6 payments: %+v, want at most 10 objects and the oldest paid one evicted", st)
	}
	if r := call(t, "GET", u+"/v1/payment_intents/"+paid[0], testKey, "", nil); r.status != 404 {
		t.Fatalf("the evicted payment: %d", r.status)
	}
	for _, id := range open {
		if r := call(t, "GET", u+"/v1/payment_intents/"+id, testKey, "", nil); r.status != 200 {
			t.Fatalf("an open payment was evicted: %d", r.status)
		}
	}
	// Fill with open payments: the paid ones go, then creation is refused.
	refused := 0
	for i := range 12 {
		r := call(t, "POST", u+"/v1/payment_intents", testKey, "", url.Values{"amount": {"100"}, "currency": {"usd"}, "metadata[i]": {fmt.Sprint(i)}})
		if r.status == http.StatusTooManyRequests {
			if r.errCode(t) != "rate_limit" {
				t.Fatalf("429 body %s", r.body)
			}
			refused++
		} else if r.status != 200 {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
	}
	if st := sim.Stats(); refused == 0 || st.Objects > 10 {
		t.Fatalf("%d refused, stats %+v", refused, st)
	}
}

// TestLoopbackOnly: the simulator listens beyond loopback only when told it is public.
func TestLoopbackOnly(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:0": true, "[::1]:0": true, "localhost:0": true,
		"0.0.0.0:0": false, ":0": false, "192.0.2.1:0": false,
	} {
		if got := paysim.Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v", addr, got)
		}
	}
	sim := paysim.New(paysim.Config{})
	defer sim.Close()
	if err := sim.Start("0.0.0.0:0"); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("Start on 0.0.0.0: %v", err)
	}
	pub := paysim.New(paysim.Config{Public: true})
	defer pub.Close()
	if err := pub.Start("0.0.0.0:0"); err != nil {
		t.Fatalf("a public simulator: %v", err)
	}
}

// TestIdempotencyAsStripe: a reply to an invalid request is not kept under its key (the
// corrected request then goes through), and a duplicate sent while the first is still being
// handled gets 409 idempotency_key_in_use, not a replay.
func TestIdempotencyAsStripe(t *testing.T) {
	block, entered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	sim := start(t, paysim.Config{Chaos: paysim.Chaos{FailAfterWrite: func(op paysim.Op, id string) bool {
		if op == paysim.OpCancel {
			once.Do(func() { close(entered); <-block })
		}
		return false
	}}})
	u := sim.URL()
	bad := call(t, "POST", u+"/v1/payment_intents", testKey, "k1", url.Values{"amount": {"0"}, "currency": {"usd"}})
	if bad.status != 400 {
		t.Fatalf("invalid: %d %s", bad.status, bad.body)
	}
	good := call(t, "POST", u+"/v1/payment_intents", testKey, "k1", url.Values{"amount": {"100"}, "currency": {"usd"}})
	if good.status != 200 || good.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the corrected request under the same key: %d %s", good.status, good.body)
	}
	id := good.json(t)["id"].(string)
	first := make(chan reply, 1)
	go func() { first <- call(t, "POST", u+"/v1/payment_intents/"+id+"/cancel", testKey, "c1", nil) }()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the first cancel never ran")
	}
	dup := call(t, "POST", u+"/v1/payment_intents/"+id+"/cancel", testKey, "c1", nil)
	close(block)
	if dup.status != http.StatusConflict || dup.errCode(t) != "idempotency_key_in_use" {
		t.Fatalf("concurrent duplicate: %d %s", dup.status, dup.body)
	}
	if r := <-first; r.status != 200 {
		t.Fatalf("first cancel: %d %s", r.status, r.body)
	}
	if r := call(t, "POST", u+"/v1/payment_intents/"+id+"/cancel", testKey, "c1", nil); r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after the first finished: %d %s", r.status, r.body)
	}
}

// TestEventsAsStripe: the events Stripe sends for a payment's life: created, processing,
// charge.succeeded/failed, refunded, and a dispute for pm_card_createDispute (a disputed
// charge can no longer be refunded).
func TestEventsAsStripe(t *testing.T) {
	rc := newReceiver(t, "whsec_ev", 0)
	sim := start(t, paysim.Config{WebhookURL: rc.url(), WebhookSecrets: []string{"whsec_ev"}, AsyncDelay: 50 * time.Millisecond, DisputeDelay: 50 * time.Millisecond})
	declined := createIntent(t, sim, "100", "d")
	confirm(t, sim, declined, paysim.CardDeclined)
	async := createIntent(t, sim, "200", "a")
	confirm(t, sim, async, paysim.CardAsync)
	disputed := createIntent(t, sim, "300", "x")
	confirm(t, sim, disputed, paysim.CardDispute)
	waitFor(t, "the dispute", func() bool { return len(rc.accepted("charge.dispute.created")) == 1 && sim.Idle() })
	waitFor(t, "the async payment", func() bool { return len(rc.accepted("payment_intent.succeeded")) == 2 && sim.Idle() })
	for typ, n := range map[string]int{"payment_intent.created": 3, "payment_intent.processing": 1, "charge.failed": 1,
		"payment_intent.payment_failed": 1, "charge.succeeded": 2, "payment_intent.succeeded": 2, "charge.dispute.created": 1} {
		if got := len(rc.accepted(typ)); got != n {
			t.Errorf("%s: %d events, want %d", typ, got, n)
		}
	}
	dp := rc.accepted("charge.dispute.created")[0].object
	if dp["object"] != "dispute" || dp["payment_intent"] != disputed["id"] || dp["amount"] != 300.0 {
		t.Fatalf("dispute object %v", dp)
	}
	if r := call(t, "POST", sim.URL()+"/v1/refunds", testKey, "", url.Values{"payment_intent": {disputed["id"].(string)}}); r.status != 400 || r.errCode(t) != "charge_disputed" {
		t.Fatalf("refund of a disputed charge: %d %s", r.status, r.body)
	}
}

// TestListPaymentIntents: the caller's payments, newest first, paged with starting_after and
// filtered by created.
func TestListPaymentIntents(t *testing.T) {
	sim := start(t, paysim.Config{})
	var ids []string
	for i := range 25 {
		ids = append(ids, createIntent(t, sim, "100", fmt.Sprint("l", i))["id"].(string))
	}
	var seen []string
	after := ""
	for page := 0; ; page++ {
		q := url.Values{"limit": {"10"}, "created[gte]": {fmt.Sprint(time.Now().Add(-time.Hour).Unix())}}
		if after != "" {
			q.Set("starting_after", after)
		}
		r := call(t, "GET", sim.URL()+"/v1/payment_intents", testKey, "", q).json(t)
		for _, d := range r["data"].([]any) {
			seen = append(seen, d.(map[string]any)["id"].(string))
		}
		if r["has_more"] != true {
			break
		}
		after = seen[len(seen)-1]
	}
	if len(seen) != 25 {
		t.Fatalf("listed %d, want 25", len(seen))
	}
	for i, id := range seen {
		if id != ids[24-i] {
			t.Fatalf("listing not newest first at %d", i)
		}
	}
	future := url.Values{"created[gte]": {fmt.Sprint(time.Now().Add(time.Hour).Unix())}}
	if r := call(t, "GET", sim.URL()+"/v1/payment_intents", testKey, "", future).json(t); len(r["data"].([]any)) != 0 {
		t.Fatalf("created filter: %v", r)
	}
}
