package reconcile_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	stripe "github.com/stripe/stripe-go/v85"

	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/payment"
	"github.com/flashsale/flashsale/internal/paysim"
	"github.com/flashsale/flashsale/internal/ranking"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// payEnv is a pipeline on a private Redis (losing it is the test) with the simulator, whose
// webhooks a payment service applies, as the api does.
type payEnv struct {
	*env
	sim *paysim.Server
	svc *payment.Service
	rdb redis.UniversalClient
	key string
}

func newPayEnv(t *testing.T) *payEnv {
	const key, secret = "sk_test_restore-payment-0123456789", "whsec_restore-payment-0123456789abcdef"
	rdb, keys, _ := testenv.PrivateRedis(t)
	e := newEnvOn(t, rdb, keys)
	sim := paysim.New(paysim.Config{APIKey: key, WebhookSecrets: []string{secret},
		RetryMin: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond,
		Chaos: paysim.Chaos{Duplicates: 2}, Logger: slog.New(slog.DiscardHandler)})
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	svc := payment.NewService(payment.NewStripe(payment.StripeOptions{Name: payment.ProviderSim,
		APIBase: sim.URL(), SecretKey: key, Secrets: []string{secret}}), e.ord, "usd")
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		switch err := svc.HandleWebhook(r.Context(), raw, r.Header.Get("Stripe-Signature")); {
		case err == nil:
		case errors.Is(err, payment.ErrBadSignature):
			w.WriteHeader(http.StatusBadRequest)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(hook.Close)
	sim.SetWebhookURL(hook.URL)

	return &payEnv{env: e, sim: sim, svc: svc, rdb: rdb, key: key}
}

// TestPaymentAfterRestorePaysOrder: a shopper opens the checkout, Redis loses its data,
// `restore --all` brings the reservation back with its attempt (payment.opened put it in the
// record), and the shopper pays on the page still open: the success pays the restored order,
// with no refund.
func TestPaymentAfterRestorePaysOrder(t *testing.T) {
	pe := newPayEnv(t)
	e, sim, svc, rdb, key := pe.env, pe.sim, pe.svc, pe.rdb, pe.key
	e.item("P", 10, 4)
	o := e.buy("P", "alice", 1)
	_, p, err := svc.Checkout(e.ctx, "alice", o.ID, "http://shop.test/")
	if err != nil {
		t.Fatal(err)
	}
	e.drain()
	if err := rdb.FlushDB(e.ctx).Err(); err != nil { // a private server: losing it is the test
		t.Fatal(err)
	}
	rec := e.reconciler(reconcile.Options{QuietFor: 10 * time.Millisecond})
	if res, err := rec.Restore(e.ctx, reconcile.RestoreOptions{All: true}); err != nil || len(res.Restored) != 1 {
		t.Fatalf("restore: %+v %v", res, err)
	}
	if _, err := paysim.PaySession(context.Background(), p.CheckoutURL, paysim.CardVisa); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := e.ord.Get(e.ctx, "alice", o.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == orders.Paid {
			if got.PaymentID != p.ID {
				t.Fatalf("paid by %q, want the session %q", got.PaymentID, p.ID)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("order %+v not paid", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for s := sim.Stats(); s.Pending != 0 || s.Delivered < s.Events; s = sim.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("webhooks not delivered: %+v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cs, err := svc.Provider.GetCheckout(e.ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	sc := stripe.NewClient(key, stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(sim.URL()), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})))
	for r, err := range sc.V1Refunds.List(e.ctx, &stripe.RefundListParams{PaymentIntent: stripe.String(cs.PaymentIntent)}).All(e.ctx) {
		t.Fatalf("a refund of the payment that paid the restored order: %v %v", r, err)
	}
}

// TestRestoreBringsPaymentsBack: Redis loses its data after shoppers paid (one charge disputed,
// one refunded) and one opened a checkout; restore --all brings every payment back from the
// record, and the open checkout is still the shop's: paying it pays its order, with no refund.
func TestRestoreBringsPaymentsBack(t *testing.T) {
	p := newPayEnv(t)
	e := p.env
	e.item("P", 10, 4)
	checkout := func(user string) (orders.Order, payment.Payment) {
		t.Helper()
		o := e.buy("P", user, 1)
		_, pay, err := p.svc.Checkout(e.ctx, user, o.ID, "http://shop.test/")
		if err != nil {
			t.Fatal(err)
		}
		return o, pay
	}
	type want struct{ status, paymentStatus string }
	deadline := time.Now().Add(60 * time.Second)
	await := func(user, id string, w want) orders.Order {
		t.Helper()
		for {
			got, err := e.ord.Get(e.ctx, user, id)
			if err != nil {
				t.Fatal(err)
			}
			if string(got.Status) == w.status && got.PaymentStatus == w.paymentStatus {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("order %s: %s/%s, want %s/%s", id, got.Status, got.PaymentStatus, w.status, w.paymentStatus)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	pay := func(pp payment.Payment, card string) {
		t.Helper()
		if _, err := paysim.PaySession(e.ctx, pp.CheckoutURL, card); err != nil {
			t.Fatal(err)
		}
	}

	paid, paidP := checkout("alice")
	pay(paidP, paysim.CardVisa)
	disputed, disputedP := checkout("carol")
	pay(disputedP, paysim.CardDispute)
	refunded, refundedP := checkout("dave")
	pay(refundedP, paysim.CardVisa)
	open, openP := checkout("bob")
	await("alice", paid.ID, want{"paid", "succeeded"})
	await("carol", disputed.ID, want{"paid", "disputed"})
	await("dave", refunded.ID, want{"paid", "succeeded"})
	if _, err := p.svc.RefundOrder(e.ctx, refunded.ID, "refund-dave", false); err != nil {
		t.Fatal(err)
	}
	await("dave", refunded.ID, want{"refunded", "refunded"})
	for s := p.sim.Stats(); s.Pending != 0 || s.Delivered < s.Events; s = p.sim.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("webhooks not delivered: %+v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.drain()

	if err := p.rdb.FlushDB(e.ctx).Err(); err != nil { // a private server: losing it is the test
		t.Fatal(err)
	}
	rec := e.reconciler(reconcile.Options{QuietFor: 10 * time.Millisecond})
	if res, err := rec.Restore(e.ctx, reconcile.RestoreOptions{All: true}); err != nil || len(res.Restored) != 1 {
		t.Fatalf("restore: %+v %v", res, err)
	}
	for _, c := range []struct {
		o    orders.Order
		pid  string
		want want
	}{
		{paid, paidP.ID, want{"paid", "succeeded"}},
		{disputed, disputedP.ID, want{"paid", "disputed"}},
		{refunded, refundedP.ID, want{"refunded", "refunded"}},
		{open, openP.ID, want{"reserved", "open"}},
	} {
		got, err := e.ord.Get(e.ctx, c.o.UserID, c.o.ID)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Status) != c.want.status || got.PaymentID != c.pid || got.PaymentStatus != c.want.paymentStatus {
			t.Errorf("restored %s: %s payment %q %s, want %s payment %q %s", c.o.ID, got.Status, got.PaymentID,
				got.PaymentStatus, c.want.status, c.pid, c.want.paymentStatus)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// The attempt opened before the loss is known by its id again: its PaymentIntent's events,
	// which carry only the metadata, find the order.
	if oid, err := e.ord.OrderOfPayment(e.ctx, openAttempt(t, p, openP.ID)); err != nil || oid != open.ID {
		t.Fatalf("attempt of %s indexed to %q (%v)", open.ID, oid, err)
	}
	pay(openP, paysim.CardVisa)
	got := await("bob", open.ID, want{"paid", "succeeded"})
	if got.PaymentID != openP.ID {
		t.Fatalf("paid by %q, want the session %q", got.PaymentID, openP.ID)
	}
	for s := p.sim.Stats(); s.Pending != 0 || s.Delivered < s.Events; s = p.sim.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("webhooks not delivered: %+v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cs, err := p.svc.Provider.GetCheckout(e.ctx, openP.ID)
	if err != nil {
		t.Fatal(err)
	}
	sc := stripe.NewClient(p.key, stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(p.sim.URL()), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})))
	for r, err := range sc.V1Refunds.List(e.ctx, &stripe.RefundListParams{PaymentIntent: stripe.String(cs.PaymentIntent)}).All(e.ctx) {
		t.Fatalf("a refund of the payment that paid the restored order: %v %v", r, err)
	}
}

// openAttempt is the flashsale_attempt of a session, as the provider holds it.
func openAttempt(t *testing.T, p *payEnv, sessionID string) string {
	t.Helper()
	sc := stripe.NewClient(p.key, stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(p.sim.URL()), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})))
	cs, err := sc.V1CheckoutSessions.Retrieve(context.Background(), sessionID, nil)
	if err != nil {
		t.Fatal(err)
	}
	att := cs.Metadata[payment.MetaAttempt]
	if att == "" {
		t.Fatalf("session %s carries no attempt", sessionID)
	}
	return att
}

// TestRestoreBestSellersLeaveRefunds: alice's 2 units are refunded without restock (still sold,
// but no buyer), bob's 1 with restock, carol's 1 stays paid: best sellers shows 1. After a loss,
// restore --all brings refunded_kept back (2) and sets best sellers to paid - refunded_kept;
// a later payment counts on top.
func TestRestoreBestSellersLeaveRefunds(t *testing.T) {
	p := newPayEnv(t)
	e := p.env
	rank := ranking.NewStore(p.rdb, e.keys, ranking.Options{Size: 10})
	e.ord.Hooks.PaidChanged = rank.PaidChanged
	e.item("B", 10, 4)
	deadline := time.Now().Add(60 * time.Second)
	paid := func(user string, qty int64) orders.Order {
		t.Helper()
		o := e.buy("B", user, qty)
		_, pay, err := p.svc.Checkout(e.ctx, user, o.ID, "http://shop.test/")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := paysim.PaySession(e.ctx, pay.CheckoutURL, paysim.CardVisa); err != nil {
			t.Fatal(err)
		}
		for {
			got, err := e.ord.Get(e.ctx, user, o.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status == orders.Paid {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("order %s of %s: %s, want paid", o.ID, user, got.Status)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	best := func() int64 {
		t.Helper()
		b, err := rank.BestSellers(e.ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range b {
			if x.ItemID == "B" {
				return int64(x.Score)
			}
		}
		return 0
	}
	settled := func() {
		t.Helper()
		for s := p.sim.Stats(); s.Pending != 0 || s.Delivered < s.Events; s = p.sim.Stats() {
			if time.Now().After(deadline) {
				t.Fatalf("webhooks not delivered: %+v", s)
			}
			time.Sleep(20 * time.Millisecond)
		}
		e.drain()
	}

	alice, bob := paid("alice", 2), paid("bob", 1)
	paid("carol", 1)
	if _, err := p.svc.RefundOrder(e.ctx, alice.ID, "refund-alice", false); err != nil {
		t.Fatal(err)
	}
	if _, err := p.svc.RefundOrder(e.ctx, bob.ID, "refund-bob", true); err != nil {
		t.Fatal(err)
	}
	if got := best(); got != 1 {
		t.Fatalf("best sellers before the loss: %d, want 1 (carol's)", got)
	}
	settled()

	if err := p.rdb.FlushDB(e.ctx).Err(); err != nil { // a private server: losing it is the test
		t.Fatal(err)
	}
	rec := e.reconciler(reconcile.Options{Ranking: rank, QuietFor: 10 * time.Millisecond, ReservationTTL: time.Hour})
	res, err := rec.Restore(e.ctx, reconcile.RestoreOptions{All: true})
	if err != nil || len(res.Restored) != 1 || res.Restored[0].Paid != 3 {
		t.Fatalf("restore: %+v %v, want B restored with 3 units paid", res, err)
	}
	if kept := num(p.rdb.HGet(e.ctx, e.keys.Item("B").Hash(), "refunded_kept").Val()); kept != 2 {
		t.Errorf("restored refunded_kept %d, want 2 (alice's)", kept)
	}
	if got := best(); got != 1 {
		t.Fatalf("best sellers after the restore: %d, want 1 (paid 3, refunded and kept 2)", got)
	}

	// The live shop's reports after the restore are numbered above the restore's figure.
	paid("dave", 1)
	if got := best(); got != 2 {
		t.Fatalf("best sellers after a payment since the restore: %d, want 2", got)
	}
}
