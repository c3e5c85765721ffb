package paysim_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v85"

	"github.com/flashsale/flashsale/internal/paysim"
)

// newSession opens a session through stripe-go as flashsale does.
func newSession(t *testing.T, sc *stripe.Client, order string, amount int64, expires time.Time) (*stripe.CheckoutSession, error) {
	t.Helper()
	md := map[string]string{"order_id": order, "flashsale_attempt": "fsa_" + order}
	p := &stripe.CheckoutSessionCreateParams{
		Mode: stripe.String("payment"),
		LineItems: []*stripe.CheckoutSessionCreateLineItemParams{{Quantity: stripe.Int64(1),
			PriceData: &stripe.CheckoutSessionCreateLineItemPriceDataParams{Currency: stripe.String("usd"), UnitAmount: stripe.Int64(amount),
				ProductData: &stripe.CheckoutSessionCreateLineItemPriceDataProductDataParams{Name: stripe.String("Lamp")}}}},
		PaymentMethodTypes: []*string{stripe.String("card")},
		SuccessURL:         stripe.String("http://shop.test/?checkout=success&session_id={CHECKOUT_SESSION_ID}"),
		CancelURL:          stripe.String("http://shop.test/?checkout=cancel"),
		ExpiresAt:          stripe.Int64(expires.Unix()),
		Metadata:           md,
		PaymentIntentData:  &stripe.CheckoutSessionCreatePaymentIntentDataParams{Metadata: md},
	}
	p.SetIdempotencyKey("checkout-fsa_" + order)
	return sc.V1CheckoutSessions.Create(context.Background(), p)
}

// TestCheckoutSessions: stripe-go opens, reads, lists and expires sessions; the hosted page
// pays them (a decline keeps the session open, a good card completes it paid, an async method
// completes it unpaid until the debit settles) with Stripe's events; the validation Stripe
// does (expires_at bounds, minimum charge, unknown parameters) is done; another key sees none.
func TestCheckoutSessions(t *testing.T) {
	rc := newReceiver(t, "whsec_sessions", 0)
	sim := start(t, paysim.Config{WebhookURL: rc.url(), WebhookSecrets: []string{"whsec_sessions"}, AsyncDelay: 300 * time.Millisecond})
	sc := stripeClient(sim)
	ctx := context.Background()
	in := time.Now().Add(time.Hour)

	cs, err := newSession(t, sc, "o1", 1999, in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cs.ID, "cs_") || cs.Status != stripe.CheckoutSessionStatusOpen || cs.PaymentStatus != stripe.CheckoutSessionPaymentStatusUnpaid ||
		cs.PaymentIntent != nil || cs.AmountTotal != 1999 || cs.URL != sim.URL()+"/c/pay/"+cs.ID || cs.Metadata["order_id"] != "o1" || cs.ExpiresAt != in.Unix() {
		t.Fatalf("created %+v", cs)
	}
	if again, err := newSession(t, sc, "o1", 1999, in); err != nil || again.ID != cs.ID {
		t.Fatalf("the same key made %v (%v), first %s", again, err, cs.ID)
	}

	// The page: a decline comes back to it, a good card goes to success_url.
	back, err := paysim.PaySession(ctx, cs.URL, paysim.CardDeclined)
	if err != nil || back != "/c/pay/"+cs.ID {
		t.Fatalf("declined: back to %q, %v", back, err)
	}
	if p := browse(t, "GET", cs.URL, nil); !strings.Contains(p.body, "declined") || !strings.Contains(p.body, `id="pay-form"`) {
		t.Fatalf("the page after a decline: %s", p.body)
	}
	back, err = paysim.PaySession(ctx, cs.URL, paysim.CardVisa)
	if err != nil || back != "http://shop.test/?checkout=success&session_id="+cs.ID {
		t.Fatalf("paid: to %q, %v", back, err)
	}
	got, err := sc.V1CheckoutSessions.Retrieve(ctx, cs.ID, nil)
	if err != nil || got.Status != stripe.CheckoutSessionStatusComplete || got.PaymentStatus != stripe.CheckoutSessionPaymentStatusPaid || got.PaymentIntent == nil {
		t.Fatalf("after paying: %+v %v", got, err)
	}
	pi, err := sc.V1PaymentIntents.Retrieve(ctx, got.PaymentIntent.ID, nil)
	if err != nil || pi.Status != stripe.PaymentIntentStatusSucceeded || pi.Metadata["flashsale_attempt"] != "fsa_o1" || pi.Amount != 1999 {
		t.Fatalf("its payment intent %+v %v", pi, err)
	}
	if _, err := sc.V1CheckoutSessions.Expire(ctx, cs.ID, nil); !isCode(err, 400) {
		t.Fatalf("expiring a complete session: %v", err)
	}

	// Async: complete unpaid, then paid.
	async, err := newSession(t, sc, "o2", 2500, in)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := paysim.PaySession(ctx, async.URL, paysim.CardAsync); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the async payment", func() bool { return len(rc.accepted("checkout.session.async_payment_succeeded")) == 1 })

	// Expire: the session ends, with its event.
	open, err := newSession(t, sc, "o3", 500, in)
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := sc.V1CheckoutSessions.Expire(ctx, open.ID, nil); err != nil || ex.Status != stripe.CheckoutSessionStatusExpired || ex.URL != "" {
		t.Fatalf("expire: %+v %v", ex, err)
	}
	waitFor(t, "every event", drained(sim))
	want := map[string]int{"checkout.session.completed": 2, "checkout.session.async_payment_succeeded": 1, "checkout.session.expired": 1,
		"payment_intent.payment_failed": 1, "payment_intent.succeeded": 2}
	for typ, n := range want {
		if got := len(rc.accepted(typ)); got != n {
			t.Errorf("%d %s events, want %d", got, typ, n)
		}
	}
	completed := rc.accepted("checkout.session.completed")
	if completed[0].object["payment_status"] != "paid" || completed[1].object["payment_status"] != "unpaid" {
		t.Errorf("completed events: %v / %v", completed[0].object["payment_status"], completed[1].object["payment_status"])
	}

	// The list: newest first, filtered by status, paged.
	var ids []string
	p := &stripe.CheckoutSessionListParams{Status: stripe.String("complete")}
	p.Limit = stripe.Int64(1)
	for s, err := range sc.V1CheckoutSessions.List(ctx, p).All(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	if strings.Join(ids, ",") != async.ID+","+cs.ID {
		t.Fatalf("complete sessions %v", ids)
	}

	// Another key sees none of them.
	other := stripe.NewClient("sk_test_someone_else", stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(sim.URL()), MaxNetworkRetries: stripe.Int64(0), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}})))
	if _, err := other.V1CheckoutSessions.Retrieve(ctx, cs.ID, nil); !isCode(err, 404) {
		t.Fatalf("another key read the session: %v", err)
	}

	// Stripe's validation.
	for name, c := range map[string]struct {
		order   string
		amount  int64
		expires time.Time
		code    string
	}{
		"expires in 29 min": {"v1", 1999, time.Now().Add(29 * time.Minute), "parameter_invalid_integer"},
		"expires in 25 h":   {"v2", 1999, time.Now().Add(25 * time.Hour), "parameter_invalid_integer"},
		"49 cents":          {"v3", 49, in, "amount_too_small"},
	} {
		if _, err := newSession(t, sc, c.order, c.amount, c.expires); !isCode(err, 400) || !strings.Contains(err.Error(), c.code) {
			t.Errorf("%s: %v", name, err)
		}
	}
	form := url.Values{"mode": {"payment"}, "success_url": {"http://shop.test/"}, "line_items[0][quantity]": {"1"},
		"line_items[0][price_data][currency]": {"usd"}, "line_items[0][price_data][unit_amount]": {"100"},
		"line_items[0][price_data][product_data][name]": {"x"}, "customer_creation": {"always"}}
	if r := call(t, "POST", sim.URL()+"/v1/checkout/sessions", testKey, "", form); r.status != 400 || r.errCode(t) != "parameter_unknown" {
		t.Fatalf("unknown parameter: %d %s", r.status, r.body)
	}
}

func isCode(err error, status int) bool {
	var se *stripe.Error
	return errors.As(err, &se) && se.HTTPStatusCode == status
}

// TestCheckoutSessionAsyncFailure: pm_card_async_fail completes the session unpaid, then its
// debit fails: the PaymentIntent needs a method again, the session stays complete, unpaid and
// unpayable, and Stripe's events for a failed delayed debit come. The method is not offered on
// the hosted page.
func TestCheckoutSessionAsyncFailure(t *testing.T) {
	rc := newReceiver(t, "whsec_sessions", 0)
	sim := start(t, paysim.Config{WebhookURL: rc.url(), WebhookSecrets: []string{"whsec_sessions"}, AsyncDelay: 300 * time.Millisecond})
	sc := stripeClient(sim)
	ctx := context.Background()
	cs, err := newSession(t, sc, "f1", 1999, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if p := browse(t, "GET", cs.URL, nil); strings.Contains(p.body, paysim.CardAsyncFail) {
		t.Fatalf("the hosted page offers %s", paysim.CardAsyncFail)
	}
	back, err := paysim.PaySession(ctx, cs.URL, paysim.CardAsyncFail)
	if err != nil || back != "http://shop.test/?checkout=success&session_id="+cs.ID {
		t.Fatalf("submitted: to %q, %v", back, err)
	}
	got, err := sc.V1CheckoutSessions.Retrieve(ctx, cs.ID, nil)
	if err != nil || got.Status != stripe.CheckoutSessionStatusComplete || got.PaymentStatus != stripe.CheckoutSessionPaymentStatusUnpaid || got.PaymentIntent == nil {
		t.Fatalf("after submitting: %+v %v", got, err)
	}
	pi, err := sc.V1PaymentIntents.Retrieve(ctx, got.PaymentIntent.ID, nil)
	if err != nil || pi.Status != stripe.PaymentIntentStatusProcessing {
		t.Fatalf("its payment intent while processing: %+v %v", pi, err)
	}
	waitFor(t, "the failed debit's session event", func() bool { return len(rc.accepted("checkout.session.async_payment_failed")) == 1 })
	waitFor(t, "every event", drained(sim))
	for typ, n := range map[string]int{"checkout.session.completed": 1, "payment_intent.processing": 1, "charge.failed": 1,
		"payment_intent.payment_failed": 1, "checkout.session.async_payment_failed": 1,
		"payment_intent.succeeded": 0, "checkout.session.async_payment_succeeded": 0, "charge.succeeded": 0} {
		if got := len(rc.accepted(typ)); got != n {
			t.Errorf("%d %s events, want %d", got, typ, n)
		}
	}
	if ev := rc.accepted("checkout.session.async_payment_failed")[0]; ev.object["id"] != cs.ID || ev.object["payment_status"] != "unpaid" {
		t.Errorf("async_payment_failed object %v", ev.object)
	}
	pi, err = sc.V1PaymentIntents.Retrieve(ctx, got.PaymentIntent.ID, nil)
	if err != nil || pi.Status != stripe.PaymentIntentStatusRequiresPaymentMethod || pi.LastPaymentError == nil || pi.AmountReceived != 0 {
		t.Fatalf("its payment intent after the failure: %+v %v", pi, err)
	}
	got, err = sc.V1CheckoutSessions.Retrieve(ctx, cs.ID, nil)
	if err != nil || got.Status != stripe.CheckoutSessionStatusComplete || got.PaymentStatus != stripe.CheckoutSessionPaymentStatusUnpaid {
		t.Fatalf("the session after the failure: %+v %v", got, err)
	}
	if back, err := paysim.PaySession(ctx, cs.URL, paysim.CardVisa); err == nil {
		t.Fatalf("a completed session was paid again (to %q)", back)
	}
}
