package payment

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v85"
)

// StripeOptions configure the Stripe client (also used, pointed at the simulator, for sim).
type StripeOptions struct {
	Name        string // ProviderStripe or ProviderSim: how payments are labelled
	APIBase     string // e.g. https://api.stripe.com or http://127.0.0.1:8090
	SecretKey   string
	Secrets     []string // webhook signing secrets: a signature under any one is accepted
	CheckoutURL string   // base of the hosted checkout page (the simulator's); "" for Stripe
	Timeout     time.Duration
}

// Stripe is the Provider speaking Stripe's API through stripe-go.
type Stripe struct {
	opts   StripeOptions
	client *stripe.Client
}

// NewStripe returns a Stripe provider.
func NewStripe(o StripeOptions) *Stripe {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Name == "" {
		o.Name = ProviderStripe
	}
	retries := int64(1)
	cfg := &stripe.BackendConfig{
		HTTPClient:        &http.Client{Timeout: o.Timeout},
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		MaxNetworkRetries: &retries,
	}
	if o.APIBase != "" {
		base := strings.TrimRight(o.APIBase, "/")
		cfg.URL = &base
	}
	return &Stripe{opts: o, client: stripe.NewClient(o.SecretKey, stripe.WithBackends(stripe.NewBackendsWithConfig(cfg)))}
}

// Name is the provider's name.
func (s *Stripe) Name() string { return s.opts.Name }

// CreatePayment creates (or, with the same Idempotency-Key, finds again) the order's payment.
func (s *Stripe) CreatePayment(ctx context.Context, orderID string, amountCents int64, currency string) (Payment, error) {
	p := &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(amountCents), Currency: stripe.String(currency)}
	p.Context = ctx
	p.SetIdempotencyKey("checkout-" + orderID)
	p.AddMetadata("order_id", orderID)
	pi, err := s.client.V1PaymentIntents.Create(ctx, p)
	if err != nil {
		return Payment{}, classify("create payment for "+orderID, err)
	}
	return s.payment(pi), nil
}

// GetPayment returns the payment's current state.
func (s *Stripe) GetPayment(ctx context.Context, id string) (Payment, error) {
	pi, err := s.client.V1PaymentIntents.Retrieve(ctx, id, &stripe.PaymentIntentRetrieveParams{})
	if err != nil {
		return Payment{}, classify("get payment "+id, err)
	}
	return s.payment(pi), nil
}

// CancelPayment cancels a payment that has not succeeded.
func (s *Stripe) CancelPayment(ctx context.Context, id string) (Payment, error) {
	p := &stripe.PaymentIntentCancelParams{}
	p.SetIdempotencyKey("cancel-" + id)
	pi, err := s.client.V1PaymentIntents.Cancel(ctx, id, p)
	if err != nil {
		return Payment{}, classify("cancel payment "+id, err)
	}
	return s.payment(pi), nil
}

// Refund refunds the payment in full, once.
func (s *Stripe) Refund(ctx context.Context, paymentID string) error {
	p := &stripe.RefundCreateParams{PaymentIntent: stripe.String(paymentID)}
	p.SetIdempotencyKey("refund-" + paymentID)
	if _, err := s.client.V1Refunds.Create(ctx, p); err != nil {
		return classify("refund payment "+paymentID, err)
	}
	return nil
}

// VerifyWebhook checks the Stripe-Signature header against every configured secret (see
// verifySignature) and decodes the event.
func (s *Stripe) VerifyWebhook(raw []byte, header string) (Event, error) {
	if err := verifySignature(raw, header, s.opts.Secrets, time.Now()); err != nil {
		return Event{}, err
	}
	ev, err := decodeEvent(raw)
	if err != nil {
		return Event{}, err
	}
	ev.Payment.Provider = s.opts.Name
	ev.Payment.CheckoutURL = s.checkoutURL(ev.Payment.ID)
	return ev, nil
}

func (s *Stripe) payment(pi *stripe.PaymentIntent) Payment {
	return Payment{
		ID: pi.ID, Provider: s.opts.Name, Status: string(pi.Status), AmountCents: pi.Amount,
		Currency: string(pi.Currency), ClientSecret: pi.ClientSecret, CheckoutURL: s.checkoutURL(pi.ID),
		OrderID: pi.Metadata["order_id"],
	}
}

func (s *Stripe) checkoutURL(id string) string {
	if s.opts.CheckoutURL == "" || id == "" {
		return ""
	}
	return strings.TrimRight(s.opts.CheckoutURL, "/") + "/checkout/" + id
}

// classify wraps a stripe-go error: a 4xx answer is ErrRejected (retrying will not help), the
// rest (no connection, a timeout, a 5xx) ErrUnavailable.
func classify(op string, err error) error {
	var se *stripe.Error
	if errors.As(err, &se) && se.HTTPStatusCode >= 400 && se.HTTPStatusCode < 500 {
		return fmt.Errorf("payment: %s: %w: %d %s: %s", op, ErrRejected, se.HTTPStatusCode, se.Code, se.Msg)
	}
	return fmt.Errorf("payment: %s: %w: %v", op, ErrUnavailable, err)
}

// PaymentStatus is the payment's current status at the provider (for reconciliation).
func (s *Stripe) PaymentStatus(ctx context.Context, id string) (string, error) {
	p, err := s.GetPayment(ctx, id)
	return p.Status, err
}

// ProviderFor is the provider the configuration names, for processes that only ask about
// payments (the reconciler): nil with none. simAddr is the simulator's host:port and simKey
// the api's key there (its payments are visible to that key only).
func ProviderFor(name, simAddr, simKey, stripeBase, stripeKey string, secrets []string) *Stripe {
	switch name {
	case ProviderStripe:
		return NewStripe(StripeOptions{Name: name, APIBase: stripeBase, SecretKey: stripeKey, Secrets: secrets})
	case ProviderSim:
		base := "http://" + simAddr
		return NewStripe(StripeOptions{Name: name, APIBase: base, SecretKey: simKey, Secrets: secrets, CheckoutURL: base})
	}
	return nil
}
