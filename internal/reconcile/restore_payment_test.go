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

	stripe "github.com/stripe/stripe-go/v85"

	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/payment"
	"github.com/flashsale/flashsale/internal/paysim"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestPaymentAfterRestorePaysOrder: a shopper opens the checkout, Redis loses its data,
// `restore --all` brings the reservation back (without its payment link, which only Redis
// held), and the shopper pays on the page still open: the success is matched by its metadata
// and pays the restored order, with no refund.
func TestPaymentAfterRestorePaysOrder(t *testing.T) {
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
