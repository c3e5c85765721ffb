package paysim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v85"

	"github.com/flashsale/flashsale/internal/paysim"
)

// stripeClient is stripe-go's own client, its API backend pointed at the simulator.
func stripeClient(sim *paysim.Server) *stripe.Client {
	return stripe.NewClient(testKey, stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL:               stripe.String(sim.URL()),
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})))
}

// TestAPIVersionIsStripeGos: the events claim the version stripe-go expects, so its
// webhook.ConstructEvent takes them without IgnoreAPIVersionMismatch.
func TestAPIVersionIsStripeGos(t *testing.T) {
	if paysim.APIVersion != stripe.APIVersion {
		t.Fatalf("paysim.APIVersion %q, stripe-go expects %q", paysim.APIVersion, stripe.APIVersion)
	}
}

// TestStripeGoClient: stripe-go creates, retrieves, confirms (visa, declined, async), cancels
// and refunds through the simulator and parses every reply and error.
func TestStripeGoClient(t *testing.T) {
	rc := newReceiver(t, "whsec_stripego", 0)
	sim := start(t, paysim.Config{WebhookURL: rc.url(), WebhookSecrets: []string{"whsec_stripego"}, AsyncDelay: time.Hour})
	sc := stripeClient(sim)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	create := func(order string) *stripe.PaymentIntent {
		t.Helper()
		params := &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(1234), Currency: stripe.String("usd"),
			Metadata: map[string]string{"order_id": order}}
		params.SetIdempotencyKey("checkout-" + order)
		pi, err := sc.V1PaymentIntents.Create(ctx, params)
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		return pi
	}

	pi := create("o1")
	if pi.Status != stripe.PaymentIntentStatusRequiresPaymentMethod || pi.Amount != 1234 || pi.Currency != "usd" ||
		pi.Metadata["order_id"] != "o1" || pi.ClientSecret == "" || pi.Created == 0 {
		t.Fatalf("created %+v", pi)
	}
	again := create("o1")
	if again.ID != pi.ID || again.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("same Idempotency-Key made %s, then %s", pi.ID, again.ID)
	}

	// Declined: a *stripe.Error card_error carrying the payment intent, now requiring a method.
	_, err := sc.V1PaymentIntents.Confirm(ctx, pi.ID, &stripe.PaymentIntentConfirmParams{
		PaymentMethod: stripe.String(paysim.CardDeclined)})
	var serr *stripe.Error
	if !errors.As(err, &serr) || serr.Type != stripe.ErrorTypeCard || serr.Code != stripe.ErrorCodeCardDeclined ||
		serr.HTTPStatusCode != 402 || serr.PaymentIntent == nil || serr.PaymentIntent.Status != stripe.PaymentIntentStatusRequiresPaymentMethod {
		t.Fatalf("declined confirm: %v (%+v)", err, serr)
	}
	got, err := sc.V1PaymentIntents.Retrieve(ctx, pi.ID, nil)
	if err != nil || got.LastPaymentError == nil || got.LastPaymentError.Code != stripe.ErrorCodeCardDeclined {
		t.Fatalf("after decline: %+v %v", got, err)
	}

	// Visa: succeeded, with a charge.
	ok, err := sc.V1PaymentIntents.Confirm(ctx, pi.ID, &stripe.PaymentIntentConfirmParams{PaymentMethod: stripe.String(paysim.CardVisa)})
	if err != nil || ok.Status != stripe.PaymentIntentStatusSucceeded || ok.AmountReceived != 1234 ||
		ok.LatestCharge == nil || ok.LatestCharge.ID == "" || ok.LastPaymentError != nil {
		t.Fatalf("visa confirm: %+v %v", ok, err)
	}

	// Refund, once per Idempotency-Key; listed by payment intent.
	rp := &stripe.RefundCreateParams{PaymentIntent: stripe.String(pi.ID)}
	rp.SetIdempotencyKey("refund-" + pi.ID)
	re, err := sc.V1Refunds.Create(ctx, rp)
	if err != nil || re.Amount != 1234 || re.PaymentIntent == nil || re.PaymentIntent.ID != pi.ID || re.Status != stripe.RefundStatusSucceeded {
		t.Fatalf("refund: %+v %v", re, err)
	}
	rp2 := &stripe.RefundCreateParams{PaymentIntent: stripe.String(pi.ID)}
	rp2.SetIdempotencyKey("refund-" + pi.ID)
	if re2, err := sc.V1Refunds.Create(ctx, rp2); err != nil || re2.ID != re.ID {
		t.Fatalf("refund replay: %+v %v", re2, err)
	}
	var listed []string
	for r, err := range sc.V1Refunds.List(ctx, &stripe.RefundListParams{PaymentIntent: stripe.String(pi.ID)}).All(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, r.ID)
	}
	if len(listed) != 1 || listed[0] != re.ID {
		t.Fatalf("refunds listed %v, want [%s]", listed, re.ID)
	}

	// Cancel an open payment; cancel is refused while an async payment is processing.
	open := create("o2")
	canceled, err := sc.V1PaymentIntents.Cancel(ctx, open.ID, &stripe.PaymentIntentCancelParams{CancellationReason: stripe.String("abandoned")})
	if err != nil || canceled.Status != stripe.PaymentIntentStatusCanceled || canceled.CanceledAt == 0 {
		t.Fatalf("cancel: %+v %v", canceled, err)
	}
	slow := create("o3")
	proc, err := sc.V1PaymentIntents.Confirm(ctx, slow.ID, &stripe.PaymentIntentConfirmParams{PaymentMethod: stripe.String(paysim.CardAsync)})
	if err != nil || proc.Status != stripe.PaymentIntentStatusProcessing {
		t.Fatalf("async confirm: %+v %v", proc, err)
	}
	_, err = sc.V1PaymentIntents.Cancel(ctx, slow.ID, nil)
	if !errors.As(err, &serr) || serr.Code != stripe.ErrorCodePaymentIntentUnexpectedState || serr.HTTPStatusCode != 400 {
		t.Fatalf("cancel while processing: %v", err)
	}

	// Every event verified with stripe-go's webhook package (see receiver).
	waitFor(t, "the webhooks", func() bool {
		return len(rc.accepted("payment_intent.payment_failed")) == 1 && len(rc.accepted("payment_intent.succeeded")) == 1 &&
			len(rc.accepted("charge.refunded")) == 1 && len(rc.accepted("refund.created")) == 1 &&
			len(rc.accepted("payment_intent.canceled")) == 1
	})
	if bad := rc.badSignatures(); len(bad) > 0 {
		t.Fatalf("stripe-go refused deliveries: %v", bad)
	}
}

// BenchmarkCheckout: one payment created and paid with stripe-go over loopback, its webhook
// delivered to a receiver that verifies it (what one purchase costs the simulator).
func BenchmarkCheckout(b *testing.B) {
	rc := newReceiver(b, "whsec_bench", 0)
	sim := paysim.New(paysim.Config{WebhookURL: rc.url(), WebhookSecrets: []string{"whsec_bench"}})
	if err := sim.Start("127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	defer sim.Close()
	sc := stripeClient(sim)
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			pi, err := sc.V1PaymentIntents.Create(ctx, &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(100), Currency: stripe.String("usd")})
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := sc.V1PaymentIntents.Confirm(ctx, pi.ID, &stripe.PaymentIntentConfirmParams{PaymentMethod: stripe.String(paysim.CardVisa)}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	for sim.Stats().Pending > 0 {
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(sim.Stats().Delivered)/b.Elapsed().Seconds(), "webhooks/s")
}
