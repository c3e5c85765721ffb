package httpapi_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	stripe "github.com/stripe/stripe-go/v85"

	"github.com/flashsale/flashsale/internal/metrics"
	"github.com/flashsale/flashsale/internal/payment"
	"github.com/flashsale/flashsale/internal/paysim"
)

// forgetPayment wipes what links the order to its checkout session (its payment record and
// the session's index), as losing them does while the shopper's checkout page stays open.
// The attempt's index stays: it is this deployment's record that the payment is the shop's
// (a restore brings it back from the record).
func (a *payAPI) forgetPayment(item, order, session string) {
	a.t.Helper()
	ctx := context.Background()
	rec, err := a.rdb.HGet(ctx, a.keys.Item(item).Payments(), order).Result()
	if err != nil {
		a.t.Fatalf("payment record of %s: %v", order, err)
	}
	f := strings.Split(rec, "|")
	att := f[len(f)-1]
	if !strings.HasPrefix(att, "fsa_") {
		a.t.Fatalf("payment record %q names no attempt", rec)
	}
	if err := a.rdb.HDel(ctx, a.keys.Item(item).Payments(), order).Err(); err != nil {
		a.t.Fatal(err)
	}
	if err := a.rdb.Del(ctx, a.keys.PaymentOrder(session)).Err(); err != nil {
		a.t.Fatal(err)
	}
	if oid, err := a.rdb.Get(ctx, a.keys.PaymentOrder(att)).Result(); err != nil || oid != order {
		a.t.Fatalf("attempt %s indexed to %q (%v), want %s", att, oid, err, order)
	}
}

// refundsOf counts the provider's refunds of a PaymentIntent, checking each is of cents.
func (a *payAPI) refundsOf(pi string, cents int64) int {
	a.t.Helper()
	n := 0
	for r, err := range a.stripe.V1Refunds.List(context.Background(), &stripe.RefundListParams{PaymentIntent: stripe.String(pi)}).All(context.Background()) {
		if err != nil {
			a.t.Fatal(err)
		}
		if r.Amount != cents {
			a.t.Errorf("refund of %d, want %d", r.Amount, cents)
		}
		n++
	}
	return n
}

// TestLostLinkPaymentRefunded: a payment the api lost its link to, whose order can no longer
// be paid (cancelled meanwhile), is found by its metadata and refunded exactly once under
// duplicated webhooks; the order stays cancelled.
func TestLostLinkPaymentRefunded(t *testing.T) {
	a := newPayAPI(t, paysim.Config{Chaos: paysim.Chaos{Duplicates: 3}}, nil)
	a.item("ol", 10, 5)
	o := a.reserve("ol", "alice")
	p := a.checkout("alice", o)
	sid := p["id"].(string)
	a.forgetPayment("ol", o, sid)
	if r := a.do("POST", "/api/orders/"+o+"/cancel", a.token("alice"), nil); r.Status != 200 {
		t.Fatalf("cancel: %d %s", r.Status, r.Raw)
	}
	a.pay(p["checkout_url"].(string), paysim.CardVisa)
	pi := a.session(sid).PaymentIntent.ID
	waitFor(t, "the refund", 30*time.Second, func() bool { return a.refundsOf(pi, 1999) > 0 })
	a.delivered()
	if n := a.refundsOf(pi, 1999); n != 1 {
		t.Fatalf("%d refunds at the provider, want 1", n)
	}
	n, _ := a.outboxTypes("ol")
	if n["order.paid"] != 0 || a.status("alice", o) != "cancelled" {
		t.Fatalf("events %v, order %s", n, a.status("alice", o))
	}
}

// TestLostLinkPaymentAttached: a payment the api lost its link to, whose order is still
// reserved, is attached by its metadata and pays the order, once, with no refund.
func TestLostLinkPaymentAttached(t *testing.T) {
	a := newPayAPI(t, paysim.Config{Chaos: paysim.Chaos{Duplicates: 3}}, nil)
	a.item("oa", 10, 5)
	o := a.reserve("oa", "alice")
	p := a.checkout("alice", o)
	sid := p["id"].(string)
	a.forgetPayment("oa", o, sid)
	a.pay(p["checkout_url"].(string), paysim.CardVisa)
	waitFor(t, "the order paid", 30*time.Second, func() bool { return a.status("alice", o) == "paid" })
	a.delivered()
	pi := a.session(sid).PaymentIntent.ID
	if n := a.refundsOf(pi, 1999); n != 0 {
		t.Fatalf("%d refunds of the payment that paid the order", n)
	}
	n, pay := a.outboxTypes("oa")
	if n["order.paid"] != 1 || pay[sid] != "order.paid" || n["payment.refunded"] != 0 {
		t.Fatalf("events %v, payments %v", n, pay)
	}
}

// TestLostLinkOldSessionRefunded: after the link was lost the shopper opened the checkout
// again (a new attempt in force); paying the old page too refunds the old payment once, and
// the new session still pays the order.
func TestLostLinkOldSessionRefunded(t *testing.T) {
	a := newPayAPI(t, paysim.Config{Chaos: paysim.Chaos{Duplicates: 3}}, nil)
	a.item("or", 10, 5)
	o := a.reserve("or", "alice")
	old := a.checkout("alice", o)
	oldID := old["id"].(string)
	a.forgetPayment("or", o, oldID)
	now := a.checkout("alice", o)
	if now["id"] == oldID {
		t.Fatalf("the checkout after the lost link answered the old session %s", oldID)
	}
	a.pay(old["checkout_url"].(string), paysim.CardVisa)
	oldPI := a.session(oldID).PaymentIntent.ID
	waitFor(t, "the old payment's refund", 30*time.Second, func() bool { return a.refundsOf(oldPI, 1999) > 0 })
	if st := a.status("alice", o); st != "reserved" {
		t.Fatalf("order %s after the old page was paid, want reserved", st)
	}
	a.pay(now["checkout_url"].(string), paysim.CardVisa)
	waitFor(t, "the order paid", 30*time.Second, func() bool { return a.status("alice", o) == "paid" })
	a.delivered()
	if n := a.refundsOf(oldPI, 1999); n != 1 {
		t.Fatalf("%d refunds of the old payment, want 1", n)
	}
	if n := a.refundsOf(a.session(now["id"].(string)).PaymentIntent.ID, 1999); n != 0 {
		t.Fatalf("%d refunds of the payment that paid the order", n)
	}
	n, pay := a.outboxTypes("or")
	if n["order.paid"] != 1 || pay[now["id"].(string)] != "order.paid" {
		t.Fatalf("events %v, payments %v", n, pay)
	}
}

// foreignPayment pays, on the shop's own account, a Checkout Session the shop never made whose
// metadata names order of user with an attempt this deployment never recorded (as another
// deployment's, or the shop's other sales', may), for cents; it returns the session.
func (a *payAPI) foreignPayment(order, user string, cents int64) *stripe.CheckoutSession {
	a.t.Helper()
	md := map[string]string{"order_id": order, "user_id": user, "flashsale_attempt": "fsa_" + rand.Text()}
	p := &stripe.CheckoutSessionCreateParams{
		Mode: stripe.String(string(stripe.CheckoutSessionModePayment)),
		LineItems: []*stripe.CheckoutSessionCreateLineItemParams{{
			Quantity: stripe.Int64(1),
			PriceData: &stripe.CheckoutSessionCreateLineItemPriceDataParams{
				Currency: stripe.String("usd"), UnitAmount: stripe.Int64(cents),
				ProductData: &stripe.CheckoutSessionCreateLineItemPriceDataProductDataParams{Name: stripe.String("elsewhere")},
			},
		}},
		SuccessURL:        stripe.String("http://elsewhere.test/ok"),
		CancelURL:         stripe.String("http://elsewhere.test/no"),
		Metadata:          md,
		PaymentIntentData: &stripe.CheckoutSessionCreatePaymentIntentDataParams{Metadata: md},
	}
	cs, err := a.stripe.V1CheckoutSessions.Create(context.Background(), p)
	if err != nil {
		a.t.Fatal(err)
	}
	a.pay(cs.URL, paysim.CardVisa)
	return a.session(cs.ID)
}

// TestForeignPaymentLeftAlone: a succeeded payment naming a real reservation of this shop but
// an attempt this deployment never recorded is not the shop's: answered 200 and counted
// unknown, never paid onto the order nor refunded, with or without an open checkout; the
// shop's own checkout still pays the order.
func TestForeignPaymentLeftAlone(t *testing.T) {
	a := newPayAPI(t, paysim.Config{Chaos: paysim.Chaos{Duplicates: 2}}, nil)
	a.item("fp", 10, 5)
	bare := a.reserve("fp", "alice")
	open := a.reserve("fp", "bob")
	mine := a.checkout("bob", open)
	unknown := func() float64 {
		return testutil.ToFloat64(metrics.PaymentWebhooks.WithLabelValues(payment.WebhookUnknown))
	}
	before := unknown()

	foreign := []*stripe.CheckoutSession{a.foreignPayment(bare, "alice", 1999), a.foreignPayment(open, "bob", 1999)}
	a.delivered()
	for _, cs := range foreign {
		if cs.PaymentIntent == nil || cs.PaymentIntent.ID == "" {
			t.Fatalf("foreign session %s has no payment", cs.ID)
		}
		if n := a.refundsOf(cs.PaymentIntent.ID, 1999); n != 0 {
			t.Errorf("%d refunds of another deployment's payment %s", n, cs.PaymentIntent.ID)
		}
	}
	if st := a.status("alice", bare); st != "reserved" {
		t.Errorf("order without checkout %s after a foreign payment, want reserved", st)
	}
	if st := a.status("bob", open); st != "reserved" {
		t.Errorf("order with an open checkout %s after a foreign payment, want reserved", st)
	}
	// Each foreign payment's success events (the session's and its PaymentIntent's).
	if got := unknown() - before; got < 2 {
		t.Errorf("%v deliveries counted unknown, want at least 2", got)
	}
	if n, _ := a.outboxTypes("fp"); n["order.paid"] != 0 || n["payment.refunded"] != 0 {
		t.Fatalf("events %v after foreign payments", n)
	}

	a.pay(mine["checkout_url"].(string), paysim.CardVisa)
	waitFor(t, "the shop's own payment", 30*time.Second, func() bool { return a.status("bob", open) == "paid" })
	a.delivered()
	if n := a.refundsOf(a.session(mine["id"].(string)).PaymentIntent.ID, 1999); n != 0 {
		t.Fatalf("%d refunds of the payment that paid the order", n)
	}
	for _, cs := range foreign {
		if n := a.refundsOf(cs.PaymentIntent.ID, 1999); n != 0 {
			t.Fatalf("%d refunds of another deployment's payment %s", n, cs.PaymentIntent.ID)
		}
	}
}
