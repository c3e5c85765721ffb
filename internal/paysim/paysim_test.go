package paysim_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v85/webhook"

	"github.com/flashsale/flashsale/internal/paysim"
)

// TestIdempotentReplay: a second request with the same key gets the first reply byte for byte
// and changes nothing; concurrent ones too; other parameters with the key are refused.
func TestIdempotentReplay(t *testing.T) {
	sim := start(t, paysim.Config{})
	form := url.Values{"amount": {"500"}, "currency": {"usd"}, "metadata[order_id]": {"o-1"}}
	first := call(t, "POST", sim.URL()+"/v1/payment_intents", testKey, "checkout-o-1", form)
	if first.status != 200 || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	var wg sync.WaitGroup
	replies := make([]reply, 8)
	for i := range replies {
		wg.Go(func() { replies[i] = call(t, "POST", sim.URL()+"/v1/payment_intents", testKey, "checkout-o-1", form) })
	}
	wg.Wait()
	for _, r := range replies {
		if r.status != 200 || !bytes.Equal(r.body, first.body) || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %d %s, first %s", r.status, r.body, first.body)
		}
	}
	// The same key from another secret key is another request.
	other := call(t, "POST", sim.URL()+"/v1/payment_intents", "sk_test_other", "checkout-o-1", form)
	if other.status != 200 || other.json(t)["id"] == first.json(t)["id"] {
		t.Fatalf("another caller's key: %d %s", other.status, other.body)
	}
	form.Set("amount", "501")
	if r := call(t, "POST", sim.URL()+"/v1/payment_intents", testKey, "checkout-o-1", form); r.status != 400 || r.errCode(t) != "idempotency_key_in_use" {
		t.Fatalf("other parameters, same key: %d %s", r.status, r.body)
	}
	// Concurrent first requests with a fresh key: exactly one payment; the others got the
	// first's reply or Stripe's conflict while it ran.
	ids := make([]string, 8)
	form.Set("amount", "700")
	for i := range ids {
		wg.Go(func() {
			r := call(t, "POST", sim.URL()+"/v1/payment_intents", testKey, "checkout-o-2", form)
			if r.status == http.StatusConflict && r.errCode(t) == "idempotency_key_in_use" {
				return
			}
			ids[i], _ = r.json(t)["id"].(string)
		})
	}
	wg.Wait()
	ids = slices.DeleteFunc(ids, func(id string) bool { return id == "" })
	if len(ids) == 0 || slices.ContainsFunc(ids, func(id string) bool { return id != ids[0] }) {
		t.Fatalf("concurrent creates with one key made %v", ids)
	}
}

// TestIdempotentReplayKeepsThe500: a provider that answers 500 after charging answers the same
// 500 to the retry (no second payment, no second charge), while the charge really happened.
func TestIdempotentReplayKeepsThe500(t *testing.T) {
	var failed sync.Map // payment intent id -> op
	rc := newReceiver(t, "whsec_500", 0)
	sim := start(t, paysim.Config{WebhookURL: rc.url(), WebhookSecrets: []string{"whsec_500"},
		Chaos: paysim.Chaos{FailAfterWrite: func(op paysim.Op, id string) bool {
			if op == paysim.OpCreate || op == paysim.OpConfirm {
				_, seen := failed.LoadOrStore(id+"/"+string(op), true)
				return !seen
			}
			return false
		}}})
	// Create: 500, the retry gets the same bytes, and the payment exists once.
	form := url.Values{"amount": {"900"}, "currency": {"eur"}, "metadata[order_id]": {"o-9"}}
	first := call(t, "POST", sim.URL()+"/v1/payment_intents", testKey, "checkout-o-9", form)
	if first.status != 500 || first.errCode(t) != "internal_error" || first.header.Get("Stripe-Should-Retry") != "false" {
		t.Fatalf("create under chaos: %d %s", first.status, first.body)
	}
	again := call(t, "POST", sim.URL()+"/v1/payment_intents", testKey, "checkout-o-9", form)
	if again.status != 500 || !bytes.Equal(again.body, first.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay of the 500: %d %s", again.status, again.body)
	}
	var piID string
	n := 0
	failed.Range(func(k, _ any) bool { piID = k.(string)[:len(k.(string))-len("/create")]; n++; return true })
	if n != 1 {
		t.Fatalf("%d payment intents created for one key", n)
	}
	r := call(t, "GET", sim.URL()+"/v1/payment_intents/"+piID, testKey, "", nil)
	pi := r.json(t)
	if r.status != 200 || pi["status"] != paysim.StatusRequiresPaymentMethod || pi["amount"] != 900.0 {
		t.Fatalf("the payment made before the 500: %d %s", r.status, r.body)
	}
	// Confirm: charged, then 500; the replay is the 500, and the webhook says it succeeded.
	cf := url.Values{"payment_method": {paysim.CardVisa}}
	c1 := call(t, "POST", sim.URL()+"/v1/payment_intents/"+piID+"/confirm", testKey, "confirm-1", cf)
	c2 := call(t, "POST", sim.URL()+"/v1/payment_intents/"+piID+"/confirm", testKey, "confirm-1", cf)
	if c1.status != 500 || c2.status != 500 || !bytes.Equal(c1.body, c2.body) {
		t.Fatalf("confirm under chaos: %d %s / %d %s", c1.status, c1.body, c2.status, c2.body)
	}
	waitFor(t, "the succeeded webhook", func() bool { return len(rc.accepted("payment_intent.succeeded")) == 1 })
	if got := call(t, "GET", sim.URL()+"/v1/payment_intents/"+piID, testKey, "", nil).json(t); got["status"] != paysim.StatusSucceeded {
		t.Fatalf("after the 500: %v", got["status"])
	}
}

// TestWebhookSignature: stripe-go's webhook.ConstructEvent (300 s tolerance, API version
// check) accepts every delivery signed with the first secret; the others, a tampered body and
// a wrong secret do not verify.
func TestWebhookSignature(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	var sigs []string
	hook := httptestServer(t, func(w http.ResponseWriter, r *http.Request) {
		body := readAll(r)
		mu.Lock()
		bodies, sigs = append(bodies, body), append(sigs, r.Header.Get("Stripe-Signature"))
		mu.Unlock()
	})
	sim := start(t, paysim.Config{WebhookURL: hook, WebhookSecrets: []string{"whsec_new", "whsec_old"}})
	pi := createIntent(t, sim, "100", "o-sig")
	if r := confirm(t, sim, pi, paysim.CardVisa); r.status != 200 {
		t.Fatalf("confirm: %d %s", r.status, r.body)
	}
	waitFor(t, "the deliveries", drained(sim))
	mu.Lock()
	defer mu.Unlock()
	var types []string
	for i := range bodies {
		ev, err := webhook.ConstructEvent(bodies[i], sigs[i], "whsec_new")
		if err != nil || ev.APIVersion != paysim.APIVersion {
			t.Fatalf("ConstructEvent: %+v %v", ev, err)
		}
		if ev.Type == "payment_intent.succeeded" && ev.Data.Object["id"] != pi["id"] {
			t.Fatalf("succeeded event of %v", ev.Data.Object["id"])
		}
		types = append(types, string(ev.Type))
	}
	slices.Sort(types)
	if want := []string{"charge.succeeded", "payment_intent.created", "payment_intent.succeeded"}; !slices.Equal(types, want) {
		t.Fatalf("events %v, want %v (as Stripe sends them)", types, want)
	}
	if _, err := webhook.ConstructEvent(bodies[0], sigs[0], "whsec_old"); err == nil {
		t.Fatal("signed with the second secret too; the first one signs")
	}
	tampered := bytes.Replace(bodies[0], []byte(`"amount":100`), []byte(`"amount":1`), 1)
	if _, err := webhook.ConstructEvent(tampered, sigs[0], "whsec_new"); !errors.Is(err, webhook.ErrNoValidSignature) {
		t.Fatalf("tampered body: %v", err)
	}
	// paysim.Sign is the same signature.
	if h := paysim.Sign(bodies[0], "whsec_new", time.Now()); webhook.ValidatePayload(bodies[0], h, "whsec_new") != nil {
		t.Fatalf("Sign made %q", h)
	}
}

// TestWebhookRetriesUntil2xx: a receiver that refuses the first attempts of every event still
// gets each event, each attempt freshly signed (the timestamps move on).
func TestWebhookRetriesUntil2xx(t *testing.T) {
	const failFirst = 3
	rc := newReceiver(t, "whsec_retry", failFirst)
	sim := start(t, paysim.Config{WebhookURL: rc.url(), WebhookSecrets: []string{"whsec_retry"}})
	for i := range 5 {
		pi := createIntent(t, sim, "250", "o-retry-"+string(rune('a'+i)))
		if r := confirm(t, sim, pi, paysim.CardVisa); r.status != 200 {
			t.Fatalf("confirm: %d %s", r.status, r.body)
		}
	}
	waitFor(t, "every event delivered", drained(sim))
	got := rc.accepted("payment_intent.succeeded")
	if len(got) != 5 {
		t.Fatalf("%d events accepted, want 5", len(got))
	}
	rc.mu.Lock()
	for id, n := range rc.attempts {
		if n != failFirst+1 {
			t.Errorf("event %s: %d attempts, want %d", id, n, failFirst+1)
		}
	}
	rc.mu.Unlock()
	const perPayment = 3 // payment_intent.created, charge.succeeded, payment_intent.succeeded
	if st := sim.Stats(); st.Attempts != perPayment*5*(failFirst+1) || st.Failed != perPayment*5*failFirst || st.Delivered != perPayment*5 {
		t.Fatalf("stats %+v", st)
	}

	// Re-signed on each attempt: with a backoff over a second, the retry's t= is later.
	var ts []int64
	var mu sync.Mutex
	hook := httptestServer(t, func(w http.ResponseWriter, r *http.Request) {
		sig := r.Header.Get("Stripe-Signature")
		if _, err := webhook.ConstructEvent(readAll(r), sig, "whsec_retry"); err != nil {
			t.Errorf("attempt does not verify: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		var sec int64
		if _, err := fmt.Sscanf(sig, "t=%d,", &sec); err != nil {
			t.Errorf("signature %q: %v", sig, err)
		}
		ts = append(ts, sec)
		if len(ts) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	slow := start(t, paysim.Config{WebhookSecrets: []string{"whsec_retry"},
		RetryMin: 2200 * time.Millisecond, RetryMax: 2200 * time.Millisecond}) // backoff ≥ 1.1 s
	pi := createIntent(t, slow, "250", "o-resign")
	slow.SetWebhookURL(hook) // one event: the cancel's
	call(t, "POST", slow.URL()+"/v1/payment_intents/"+pi["id"].(string)+"/cancel", testKey, "", nil)
	waitFor(t, "the retry", drained(slow))
	mu.Lock()
	defer mu.Unlock()
	if len(ts) != 2 || ts[1] <= ts[0] {
		t.Fatalf("signature timestamps %v: want two, the retry's later", ts)
	}
}

// TestChaosDuplicatesAndReorder: a storm — every event arrives 1..N times under one event id,
// late, out of order, and only at the second attempt (the receiver refuses each event id's
// first one) — still brings every event.
func TestChaosDuplicatesAndReorder(t *testing.T) {
	rc := newReceiver(t, "whsec_chaos", 1)
	sim := start(t, paysim.Config{WebhookURL: rc.url(), WebhookSecrets: []string{"whsec_chaos"},
		Chaos: paysim.Chaos{Duplicates: 4, ReorderWindow: 500 * time.Millisecond, Delay: 20 * time.Millisecond}})
	const n = 100
	began := time.Now()
	var order []string
	for i := range n {
		pi := createIntent(t, sim, "100", "o")
		order = append(order, pi["id"].(string))
		if r := confirm(t, sim, pi, paysim.CardVisa); r.status != 200 {
			t.Fatalf("confirm %d: %d %s", i, r.status, r.body)
		}
	}
	waitFor(t, "every copy delivered", drained(sim))
	got := rc.accepted("payment_intent.succeeded")
	copies := map[string]int{}
	var firstSeen []string
	for _, g := range got {
		if copies[g.id] == 0 {
			firstSeen = append(firstSeen, g.object["id"].(string))
		}
		copies[g.id]++
	}
	st := sim.Stats()
	if len(copies) != n || int64(len(rc.accepted(""))) != st.Delivered || st.Events != 3*n {
		t.Fatalf("%d distinct events in %d deliveries, stats %+v", len(copies), len(got), st)
	}
	dup := 0
	for id, c := range copies {
		if c < 1 || c > 4 {
			t.Fatalf("event %s delivered %d times", id, c)
		}
		if c > 1 {
			dup++
		}
	}
	if dup == 0 {
		t.Fatal("no event was duplicated")
	}
	if slices.Equal(firstSeen, order) {
		t.Fatal("events arrived in the order they were made")
	}
	t.Logf("%d events, %d deliveries accepted, %d duplicated, %d attempts, all delivered %s after the first payment",
		n, len(got), dup, st.Attempts, time.Since(began).Round(time.Millisecond))
}

// TestDeclineThenPay: a declined card leaves the payment payable, says why, and sends
// payment_intent.payment_failed; another card then pays it.
func TestDeclineThenPay(t *testing.T) {
	rc := newReceiver(t, "whsec_decline", 0)
	sim := start(t, paysim.Config{WebhookURL: rc.url(), WebhookSecrets: []string{"whsec_decline"}})
	pi := createIntent(t, sim, "1999", "o-d")
	r := confirm(t, sim, pi, paysim.CardDeclined)
	if r.status != 402 || r.errCode(t) != "card_declined" {
		t.Fatalf("declined: %d %s", r.status, r.body)
	}
	e := r.json(t)["error"].(map[string]any)
	if e["type"] != "card_error" || e["payment_intent"].(map[string]any)["status"] != paysim.StatusRequiresPaymentMethod {
		t.Fatalf("declined error %v", e)
	}
	got := call(t, "GET", sim.URL()+"/v1/payment_intents/"+pi["id"].(string), "", "", url.Values{"client_secret": {pi["client_secret"].(string)}}).json(t)
	if lpe, _ := got["last_payment_error"].(map[string]any); got["status"] != paysim.StatusRequiresPaymentMethod || lpe["code"] != "card_declined" {
		t.Fatalf("after the decline: %v", got)
	}
	waitFor(t, "payment_failed", func() bool { return len(rc.accepted("payment_intent.payment_failed")) == 1 })
	if f := rc.accepted("payment_intent.payment_failed")[0]; f.object["id"] != pi["id"] || f.object["last_payment_error"] == nil {
		t.Fatalf("payment_failed event object %v", f.object)
	}
	if r := confirm(t, sim, pi, paysim.CardVisa); r.status != 200 || r.json(t)["status"] != paysim.StatusSucceeded || r.json(t)["last_payment_error"] != nil {
		t.Fatalf("second card: %d %s", r.status, r.body)
	}
	waitFor(t, "succeeded", func() bool { return len(rc.accepted("payment_intent.succeeded")) == 1 })
	if r := confirm(t, sim, pi, paysim.CardVisa); r.status != 400 || r.errCode(t) != "payment_intent_unexpected_state" {
		t.Fatalf("confirm of a succeeded payment: %d %s", r.status, r.body)
	}
}

// TestAsyncCannotBeCancelled: pm_card_async is processing, cancel is refused meanwhile, and
// the payment then succeeds (the late payment the api has to refund).
func TestAsyncCannotBeCancelled(t *testing.T) {
	rc := newReceiver(t, "whsec_async", 0)
	sim := start(t, paysim.Config{WebhookURL: rc.url(), WebhookSecrets: []string{"whsec_async"}, AsyncDelay: time.Hour})
	pi := createIntent(t, sim, "300", "o-a")
	id := pi["id"].(string)
	if r := confirm(t, sim, pi, paysim.CardAsync); r.status != 200 || r.json(t)["status"] != paysim.StatusProcessing {
		t.Fatalf("async confirm: %d %s", r.status, r.body)
	}
	r := call(t, "POST", sim.URL()+"/v1/payment_intents/"+id+"/cancel", testKey, "", nil)
	if r.status != 400 || r.errCode(t) != "payment_intent_unexpected_state" {
		t.Fatalf("cancel while processing: %d %s", r.status, r.body)
	}
	if r := call(t, "POST", sim.URL()+"/v1/refunds", testKey, "", url.Values{"payment_intent": {id}}); r.status != 400 {
		t.Fatalf("refund while processing: %d %s", r.status, r.body)
	}
	paysim.SettleAsync(sim, id)
	waitFor(t, "succeeded", func() bool { return len(rc.accepted("payment_intent.succeeded")) == 1 })
	if got := call(t, "GET", sim.URL()+"/v1/payment_intents/"+id, testKey, "", nil).json(t); got["status"] != paysim.StatusSucceeded {
		t.Fatalf("after settling: %v", got["status"])
	}
	if len(rc.accepted("payment_intent.canceled")) != 0 {
		t.Fatal("a refused cancel sent payment_intent.canceled")
	}

	// The delay itself: with a short one the payment succeeds on its own.
	quick := start(t, paysim.Config{WebhookURL: rc.url(), WebhookSecrets: []string{"whsec_async"}, AsyncDelay: 50 * time.Millisecond})
	p2 := createIntent(t, quick, "300", "o-a2")
	confirm(t, quick, p2, paysim.CardAsync)
	waitFor(t, "the async success", func() bool { return len(rc.accepted("payment_intent.succeeded")) == 2 })
}

// TestCancel: an open payment is cancelled once; paying or cancelling it again is refused.
func TestCancel(t *testing.T) {
	rc := newReceiver(t, "whsec_cancel", 0)
	sim := start(t, paysim.Config{WebhookURL: rc.url(), WebhookSecrets: []string{"whsec_cancel"}})
	pi := createIntent(t, sim, "300", "o-c")
	id := pi["id"].(string)
	r := call(t, "POST", sim.URL()+"/v1/payment_intents/"+id+"/cancel", testKey, "cancel-"+id, nil)
	if r.status != 200 || r.json(t)["status"] != paysim.StatusCanceled {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	if again := call(t, "POST", sim.URL()+"/v1/payment_intents/"+id+"/cancel", testKey, "cancel-"+id, nil); !bytes.Equal(again.body, r.body) {
		t.Fatalf("cancel replay: %s", again.body)
	}
	if again := call(t, "POST", sim.URL()+"/v1/payment_intents/"+id+"/cancel", testKey, "", nil); again.status != 400 || again.errCode(t) != "payment_intent_unexpected_state" {
		t.Fatalf("second cancel: %d %s", again.status, again.body)
	}
	if c := confirm(t, sim, pi, paysim.CardVisa); c.status != 400 || c.errCode(t) != "payment_intent_unexpected_state" {
		t.Fatalf("pay a cancelled payment: %d %s", c.status, c.body)
	}
	waitFor(t, "canceled", drained(sim))
	if len(rc.accepted("payment_intent.canceled")) != 1 || len(rc.accepted("")) != 2 {
		t.Fatalf("events %v", rc.accepted(""))
	}
}

// TestRefundOncePerKey: a refund with an Idempotency-Key is made once however often (and
// concurrently) it is sent; a second refund of a fully refunded payment is refused.
func TestRefundOncePerKey(t *testing.T) {
	rc := newReceiver(t, "whsec_refund", 0)
	sim := start(t, paysim.Config{WebhookURL: rc.url(), WebhookSecrets: []string{"whsec_refund"}})
	pi := createIntent(t, sim, "4200", "o-r")
	id := pi["id"].(string)
	if r := confirm(t, sim, pi, paysim.CardVisa); r.status != 200 {
		t.Fatalf("confirm: %d %s", r.status, r.body)
	}
	replies := make([]reply, 10)
	var wg sync.WaitGroup
	for i := range replies {
		wg.Go(func() {
			replies[i] = call(t, "POST", sim.URL()+"/v1/refunds", testKey, "refund-"+id, url.Values{"payment_intent": {id}})
		})
	}
	wg.Wait()
	// As at Stripe, a duplicate sent while the first is in progress is a 409
	// idempotency_key_in_use; every other reply is the one refund, and so is a later resend.
	again := call(t, "POST", sim.URL()+"/v1/refunds", testKey, "refund-"+id, url.Values{"payment_intent": {id}})
	if again.status != 200 {
		t.Fatalf("refund resent: %d %s", again.status, again.body)
	}
	for _, r := range replies {
		if r.status == 409 && r.errCode(t) == "idempotency_key_in_use" {
			continue
		}
		if r.status != 200 || !bytes.Equal(r.body, again.body) {
			t.Fatalf("refund replies differ: %d %s / %s", r.status, r.body, again.body)
		}
	}
	if re := again.json(t); re["object"] != "refund" || re["amount"] != 4200.0 || re["payment_intent"] != id || re["status"] != "succeeded" {
		t.Fatalf("refund %v", re)
	}
	if r := call(t, "POST", sim.URL()+"/v1/refunds", testKey, "refund-other", url.Values{"payment_intent": {id}}); r.status != 400 || r.errCode(t) != "charge_already_refunded" {
		t.Fatalf("second refund: %d %s", r.status, r.body)
	}
	list := call(t, "GET", sim.URL()+"/v1/refunds", testKey, "", url.Values{"payment_intent": {id}})
	if data, _ := list.json(t)["data"].([]any); list.status != 200 || len(data) != 1 {
		t.Fatalf("refunds of %s: %d %s", id, list.status, list.body)
	}
	if r := call(t, "GET", sim.URL()+"/v1/refunds", testKey, "", url.Values{"payment_intent": {"pi_nope"}}); r.status != 400 || r.errCode(t) != "resource_missing" {
		t.Fatalf("refunds of an unknown payment: %d %s", r.status, r.body)
	}
	waitFor(t, "charge.refunded", func() bool {
		return len(rc.accepted("charge.refunded")) == 1 && len(rc.accepted("refund.created")) == 1
	})
	if ch := rc.accepted("charge.refunded")[0].object; ch["refunded"] != true || ch["payment_intent"] != id || ch["amount_refunded"] != 4200.0 {
		t.Fatalf("charge.refunded object %v", ch)
	}
}

// TestBadRequests: Stripe's error shape, and nothing is made, for every refused request.
func TestBadRequests(t *testing.T) {
	sim := start(t, paysim.Config{APIKey: "sk_test_only"})
	u := sim.URL()
	pi := call(t, "POST", u+"/v1/payment_intents", "sk_test_only", "", url.Values{"amount": {"100"}, "currency": {"usd"}}).json(t)
	id := pi["id"].(string)
	for _, c := range []struct {
		name, method, path, key string
		form                    url.Values
		status                  int
		code                    string
	}{
		{"no key", "POST", "/v1/payment_intents", "", url.Values{"amount": {"1"}, "currency": {"usd"}}, 401, "api_key_invalid"},
		{"not a test key", "POST", "/v1/payment_intents", "sk_live_other", url.Values{"amount": {"1"}, "currency": {"usd"}}, 401, "api_key_invalid"},
		{"unknown parameter", "POST", "/v1/payment_intents", "sk_test_only", url.Values{"amount": {"1"}, "currency": {"usd"}, "statement_descriptor": {"x"}}, 400, "parameter_unknown"},
		{"description too long", "POST", "/v1/payment_intents", "sk_test_only", url.Values{"amount": {"1"}, "currency": {"usd"}, "description": {strings.Repeat("d", 1001)}}, 400, "parameter_invalid_string"},
		{"another account's payment", "GET", "/v1/payment_intents/" + id, "sk_test_other", nil, 404, "resource_missing"},
		{"list with a bad limit", "GET", "/v1/payment_intents", "sk_test_only", url.Values{"limit": {"101"}}, 400, "parameter_invalid_integer"},
		{"no amount", "POST", "/v1/payment_intents", "sk_test_only", url.Values{"currency": {"usd"}}, 400, "parameter_missing"},
		{"amount 0", "POST", "/v1/payment_intents", "sk_test_only", url.Values{"amount": {"0"}, "currency": {"usd"}}, 400, "amount_too_small"},
		{"amount text", "POST", "/v1/payment_intents", "sk_test_only", url.Values{"amount": {"ten"}, "currency": {"usd"}}, 400, "parameter_invalid_integer"},
		{"bad currency", "POST", "/v1/payment_intents", "sk_test_only", url.Values{"amount": {"1"}, "currency": {"dollars"}}, 400, "parameter_invalid_string"},
		{"unknown card", "POST", "/v1/payment_intents/" + id + "/confirm", "sk_test_only", url.Values{"payment_method": {"pm_card_gold"}}, 400, "resource_missing"},
		{"no card", "POST", "/v1/payment_intents/" + id + "/confirm", "sk_test_only", nil, 400, "payment_intent_unexpected_state"},
		{"wrong client_secret", "POST", "/v1/payment_intents/" + id + "/confirm", "", url.Values{"client_secret": {"x"}, "payment_method": {"pm_card_visa"}}, 400, "payment_intent_invalid_parameter"},
		{"neither key nor secret", "GET", "/v1/payment_intents/" + id, "", nil, 401, "api_key_invalid"},
		{"unknown payment", "GET", "/v1/payment_intents/pi_nope", "sk_test_only", nil, 404, "resource_missing"},
		{"cancel needs the key", "POST", "/v1/payment_intents/" + id + "/cancel", "", url.Values{"client_secret": {pi["client_secret"].(string)}}, 401, "api_key_invalid"},
		{"refund of an unpaid payment", "POST", "/v1/refunds", "sk_test_only", url.Values{"payment_intent": {id}}, 400, "payment_intent_unexpected_state"},
		{"refund without payment", "POST", "/v1/refunds", "sk_test_only", nil, 400, "parameter_missing"},
		{"refund of an unknown payment", "POST", "/v1/refunds", "sk_test_only", url.Values{"payment_intent": {"pi_nope"}}, 400, "resource_missing"},
		{"unknown route", "POST", "/v1/charges", "sk_test_only", nil, 404, "resource_missing"},
	} {
		r := call(t, c.method, u+c.path, c.key, "", c.form)
		if r.status != c.status || r.errCode(t) != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, r.status, r.body, c.status, c.code)
		}
	}
	if got := call(t, "GET", u+"/v1/payment_intents/"+id, "sk_test_only", "", nil).json(t); got["status"] != paysim.StatusRequiresPaymentMethod || got["payment_method"] != nil {
		t.Fatalf("refused requests changed the payment: %v", got)
	}
}

// TestBoundedQueue: with the queue full, a change waits for room before it is answered, and
// no event is lost.
func TestBoundedQueue(t *testing.T) {
	rc := newReceiver(t, "whsec_q", 0)
	rc.refuse = true
	sim := start(t, paysim.Config{WebhookSecrets: []string{"whsec_q"}, QueueMax: 1})
	p1, p2 := createIntent(t, sim, "100", "q1"), createIntent(t, sim, "100", "q2")
	sim.SetWebhookURL(rc.url())
	go confirm(t, sim, p1, paysim.CardVisa) // two events: waits for room for the second
	var answered atomic.Bool
	done := make(chan reply)
	go func() { r := confirm(t, sim, p2, paysim.CardVisa); answered.Store(true); done <- r }()
	// The first event has been refused twice while the second change waits.
	waitFor(t, "two refused attempts", func() bool { rc.mu.Lock(); defer rc.mu.Unlock(); return sumAttempts(rc) >= 2 })
	if answered.Load() {
		t.Fatal("a change was answered while the webhook queue was full")
	}
	rc.mu.Lock()
	rc.refuse = false
	rc.mu.Unlock()
	if r := <-done; r.status != 200 {
		t.Fatalf("second confirm: %d %s", r.status, r.body)
	}
	waitFor(t, "both delivered", func() bool { return len(rc.accepted("payment_intent.succeeded")) == 2 && sim.Idle() })
}

func sumAttempts(rc *receiver) int {
	n := 0
	for _, a := range rc.attempts {
		n += a
	}
	return n
}

// TestCloseStopsDeliveries: Close ends the retries of a receiver that never answers 2xx, and
// the server stops answering.
func TestCloseStopsDeliveries(t *testing.T) {
	rc := newReceiver(t, "whsec_close", 0)
	rc.refuse = true
	sim := paysim.New(paysim.Config{APIKey: testKey, WebhookURL: rc.url(), WebhookSecrets: []string{"whsec_close"},
		RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if !paysim.Answering(context.Background(), sim.Addr()) {
		t.Fatal("a started simulator does not answer")
	}
	pi := createIntent(t, sim, "100", "c")
	confirm(t, sim, pi, paysim.CardVisa)
	waitFor(t, "retries", func() bool { return sim.Stats().Failed >= 3 })
	if err := sim.Close(); err != nil {
		t.Fatal(err)
	}
	after := sim.Stats().Attempts
	if paysim.Answering(context.Background(), sim.Addr()) {
		t.Fatal("a closed simulator still answers")
	}
	// A second simulator on the same address: taken while the first runs, free after Close.
	again := paysim.New(paysim.Config{})
	defer again.Close()
	if err := again.Start(sim.Addr()); err != nil {
		t.Fatalf("address not free after Close: %v", err)
	}
	third := paysim.New(paysim.Config{})
	defer third.Close()
	if err := third.Start(sim.Addr()); !errors.Is(err, paysim.ErrAddrInUse) {
		t.Fatalf("second listener on a taken address: %v", err)
	}
	if st := sim.Stats(); st.Attempts != after {
		t.Fatalf("attempts went on after Close: %d then %d", after, st.Attempts)
	}
}

// TestSetWebhookURL: without a URL events are made but not sent; once one is set, they are.
func TestSetWebhookURL(t *testing.T) {
	rc := newReceiver(t, "whsec_late", 0)
	sim := start(t, paysim.Config{WebhookSecrets: []string{"whsec_late"}})
	confirm(t, sim, createIntent(t, sim, "100", "before"), paysim.CardVisa)
	sim.SetWebhookURL(rc.url())
	confirm(t, sim, createIntent(t, sim, "100", "after"), paysim.CardVisa)
	waitFor(t, "the second payment's events", func() bool { return len(rc.accepted("")) == 3 && sim.Stats().Pending == 0 })
	if st := sim.Stats(); st.Events != 6 || st.Delivered != 3 {
		t.Fatalf("stats %+v", st)
	}
	if got := rc.accepted("")[0].object["metadata"].(map[string]any)["order_id"]; got != "after" {
		t.Fatalf("delivered the event of %v", got)
	}
}
