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
	Name      string // ProviderStripe or ProviderSim: how payments are labelled
	APIBase   string // e.g. https://api.stripe.com or http://127.0.0.1:8090
	SecretKey string
	Secrets   []string // webhook signing secrets: a signature under any one is accepted
	Timeout   time.Duration
}

// Stripe is the Provider speaking Stripe's API through stripe-go (Stripe's own client: its
// form encoding, its retry rules and its error types are Stripe's, where hand-written HTTP
// would have to guess them).
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

// CreateCheckout opens the attempt's Checkout Session: card payments only (they settle at
// once, or within the processing hold), the order's metadata on the session and on its
// PaymentIntent.
func (s *Stripe) CreateCheckout(ctx context.Context, r CheckoutRequest) (Session, error) {
	md := map[string]string{MetaOrder: r.OrderID, MetaUser: r.UserID, MetaAttempt: r.Attempt}
	p := &stripe.CheckoutSessionCreateParams{
		Mode: stripe.String(string(stripe.CheckoutSessionModePayment)),
		LineItems: []*stripe.CheckoutSessionCreateLineItemParams{{
			Quantity: stripe.Int64(r.Quantity),
			PriceData: &stripe.CheckoutSessionCreateLineItemPriceDataParams{
				Currency:    stripe.String(r.Currency),
				UnitAmount:  stripe.Int64(r.UnitAmount),
				ProductData: &stripe.CheckoutSessionCreateLineItemPriceDataProductDataParams{Name: stripe.String(r.ItemName)},
			},
		}},
		PaymentMethodTypes: []*string{stripe.String("card")},
		SuccessURL:         stripe.String(r.SuccessURL),
		CancelURL:          stripe.String(r.CancelURL),
		ClientReferenceID:  stripe.String(r.OrderID),
		ExpiresAt:          stripe.Int64(r.ExpiresAt.Unix()),
		Metadata:           md,
		PaymentIntentData:  &stripe.CheckoutSessionCreatePaymentIntentDataParams{Metadata: md},
	}
	p.SetIdempotencyKey("checkout-" + r.Attempt)
	cs, err := s.client.V1CheckoutSessions.Create(ctx, p)
	if err != nil {
		return Session{}, classify("create checkout for "+r.OrderID, err)
	}
	return session(cs), nil
}

// GetCheckout returns the session's current state.
func (s *Stripe) GetCheckout(ctx context.Context, id string) (Session, error) {
	cs, err := s.client.V1CheckoutSessions.Retrieve(ctx, id, &stripe.CheckoutSessionRetrieveParams{})
	if err != nil {
		return Session{}, classify("get checkout "+id, err)
	}
	return session(cs), nil
}

// ExpireCheckout ends an open session.
func (s *Stripe) ExpireCheckout(ctx context.Context, id string) (Session, error) {
	p := &stripe.CheckoutSessionExpireParams{}
	p.SetIdempotencyKey("expire-" + id)
	cs, err := s.client.V1CheckoutSessions.Expire(ctx, id, p)
	if err != nil {
		return Session{}, classify("expire checkout "+id, err)
	}
	return session(cs), nil
}

// FindCheckouts pages through the open sessions made since since, newest first, and returns
// those whose metadata names attempt (Stripe cannot filter sessions by metadata).
func (s *Stripe) FindCheckouts(ctx context.Context, attempt string, since time.Time) ([]Session, error) {
	p := &stripe.CheckoutSessionListParams{
		Status:       stripe.String(string(stripe.CheckoutSessionStatusOpen)),
		CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()},
	}
	p.Limit = stripe.Int64(100)
	var out []Session
	for cs, err := range s.client.V1CheckoutSessions.List(ctx, p).All(ctx) {
		if err != nil {
			return out, classify("list checkouts", err)
		}
		if cs.Metadata[MetaAttempt] == attempt {
			out = append(out, session(cs))
		}
	}
	return out, nil
}

// PaymentStatus is a payment's status at the provider (for reconciliation): a
// PaymentIntent's, or for a Checkout Session (cs_…) its PaymentIntent's, or the session's own
// status while it has none.
func (s *Stripe) PaymentStatus(ctx context.Context, id string) (string, error) {
	if strings.HasPrefix(id, "cs_") {
		cs, err := s.GetCheckout(ctx, id)
		if err != nil || cs.PaymentIntent == "" {
			return cs.Status, err
		}
		id = cs.PaymentIntent
	}
	pi, err := s.client.V1PaymentIntents.Retrieve(ctx, id, &stripe.PaymentIntentRetrieveParams{})
	if err != nil {
		return "", classify("get payment "+id, err)
	}
	return string(pi.Status), nil
}

// Refund refunds the PaymentIntent in full, once.
func (s *Stripe) Refund(ctx context.Context, paymentIntent string) error {
	p := &stripe.RefundCreateParams{PaymentIntent: stripe.String(paymentIntent)}
	p.SetIdempotencyKey("refund-" + paymentIntent)
	if _, err := s.client.V1Refunds.Create(ctx, p); err != nil {
		return classify("refund payment "+paymentIntent, err)
	}
	return nil
}

// VerifyWebhook checks the Stripe-Signature header against every configured secret (see
// verifySignature) and decodes the event.
func (s *Stripe) VerifyWebhook(raw []byte, header string) (Event, error) {
	if err := verifySignature(raw, header, s.opts.Secrets, time.Now()); err != nil {
		return Event{}, err
	}
	return decodeEvent(raw)
}

func session(cs *stripe.CheckoutSession) Session {
	out := Session{
		ID: cs.ID, Status: string(cs.Status), PaymentStatus: string(cs.PaymentStatus), URL: cs.URL,
		AmountTotal: cs.AmountTotal, Currency: string(cs.Currency), Metadata: cs.Metadata,
		ExpiresAt: time.Unix(cs.ExpiresAt, 0).UTC(),
	}
	if cs.PaymentIntent != nil {
		out.PaymentIntent = cs.PaymentIntent.ID
	}
	return out
}

// classify wraps a stripe-go error: a 4xx answer is a *Refusal (ErrRejected: retrying will
// not help), except 409 (a concurrent request with the same Idempotency-Key) and 429 (rate
// limited), which pass; the rest (no connection, a timeout, a 5xx) is ErrUnavailable.
func classify(op string, err error) error {
	var se *stripe.Error
	if errors.As(err, &se) {
		st := se.HTTPStatusCode
		switch {
		case st >= 400 && st < 500 && st != http.StatusConflict && st != http.StatusTooManyRequests:
			reason := se.Msg
			if reason == "" {
				reason = fmt.Sprintf("refused (%d %s)", st, se.Code)
			}
			return fmt.Errorf("payment: %s: %w", op, &Refusal{Status: st, Code: string(se.Code), Reason: reason})
		case st >= 500:
			return fmt.Errorf("payment: %s: %w: %w: %d %s", op, ErrUnavailable, errAnswered5xx, st, se.Msg)
		}
	}
	return fmt.Errorf("payment: %s: %w: %v", op, ErrUnavailable, err)
}

// ProviderFor is the provider the configuration names, for processes that only ask about
// payments (the reconciler): nil with none. simAddr is the simulator's host:port and simKey
// the api's key there (its payments are visible to that key only).
func ProviderFor(name, simAddr, simKey, stripeBase, stripeKey string, secrets []string) *Stripe {
	switch name {
	case ProviderStripe:
		return NewStripe(StripeOptions{Name: name, APIBase: stripeBase, SecretKey: stripeKey, Secrets: secrets})
	case ProviderSim:
		return NewStripe(StripeOptions{Name: name, APIBase: "http://" + simAddr, SecretKey: simKey, Secrets: secrets})
	}
	return nil
}
