package payment_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/payment"
)

// stripeMock starts stripe-mock (Stripe's OpenAPI-driven mock, v0.203.0, which scripts/test.sh
// installs) on a free loopback port and returns its URL. It validates every request against
// Stripe's published OpenAPI spec: an unknown parameter, a wrong type or a missing required
// one is a 4xx.
func stripeMock(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("stripe-mock")
	if err != nil {
		bin = filepath.Join(os.Getenv("HOME"), "go", "bin", "stripe-mock")
		if gp := os.Getenv("GOPATH"); gp != "" {
			bin = filepath.Join(gp, "bin", "stripe-mock")
		}
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("stripe-mock is not installed: go install github.com/stripe/stripe-mock@v0.203.0 (scripts/test.sh does)")
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "-http-addr", addr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(url + "/v1/checkout/sessions/cs_test_ready")
		if err == nil {
			res.Body.Close()
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripe-mock did not answer on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStripeProviderAgainstStripeMock: every request the stripe provider sends is valid Stripe:
// stripe-mock accepts each (a 4xx, a *payment.Refusal, fails the test).
func TestStripeProviderAgainstStripeMock(t *testing.T) {
	p := payment.NewStripe(payment.StripeOptions{Name: payment.ProviderStripe, APIBase: stripeMock(t),
		SecretKey: "sk_test_123", Secrets: []string{"whsec_0123456789abcdef0123456789abcdef"}})
	ctx := context.Background()
	ok := func(op string, err error) {
		t.Helper()
		var r *payment.Refusal
		if errors.As(err, &r) {
			t.Fatalf("%s: stripe-mock refused the request (%d %s): %s", op, r.Status, r.Code, r.Reason)
		}
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
	}
	cs, err := p.CreateCheckout(ctx, payment.CheckoutRequest{
		OrderID: "item.1", UserID: "alice", Attempt: "fsa_ABCDEFGHIJKLMNOPQRSTUVWXYZ", ItemName: "Lamp",
		Quantity: 2, UnitAmount: 1999, Currency: "usd",
		SuccessURL: "https://shop.example/?checkout=success&order=item.1&session_id={CHECKOUT_SESSION_ID}",
		CancelURL:  "https://shop.example/?checkout=cancel&order=item.1",
		ExpiresAt:  time.Now().Add(40 * time.Minute),
	})
	ok("create checkout session", err)
	if cs.ID == "" {
		t.Fatal("no session id")
	}
	_, err = p.GetCheckout(ctx, cs.ID)
	ok("retrieve checkout session", err)
	_, err = p.ExpireCheckout(ctx, cs.ID)
	ok("expire checkout session", err)
	_, err = p.FindCheckouts(ctx, "fsa_ABCDEFGHIJKLMNOPQRSTUVWXYZ", time.Now().Add(-time.Hour))
	ok("list checkout sessions", err)
	_, err = p.PaymentStatus(ctx, "pi_123")
	ok("retrieve payment intent", err)
	_, err = p.PaymentStatus(ctx, cs.ID)
	ok("retrieve a session's payment", err)
	ok("refund", p.Refund(ctx, "pi_123"))
}
