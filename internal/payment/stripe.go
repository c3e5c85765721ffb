package payment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
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
	http   *http.Client // the listing's own requests (ListPayments)
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
	return &Stripe{opts: o, client: stripe.NewClient(o.SecretKey, stripe.WithBackends(stripe.NewBackendsWithConfig(cfg))),
		http: &http.Client{Timeout: o.Timeout}}
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

// ProviderPayment is one payment as the provider lists it, for money reconciliation.
type ProviderPayment struct {
	ID            string // the PaymentIntent's id
	Status        string // Stripe's PaymentIntent status
	AmountCents   int64
	Currency      string
	RefundedCents int64  // refunded so far on its latest charge
	Disputed      bool   // its latest charge is disputed
	OrderID       string // metadata[order_id] ("" for a payment that is not a shop's order)
	Attempt       string // metadata[flashsale_attempt]
	Created       time.Time
}

// ListPayments calls fn with every PaymentIntent created at or after since, newest first, page
// by page (GET /v1/payment_intents, latest charge expanded so refunds come along). It reads the
// pages itself: stripe-go's list iterator decodes every PaymentIntent in full, too slow for a
// large listing. An error from fn stops the listing and is returned.
func (s *Stripe) ListPayments(ctx context.Context, since time.Time, fn func(ProviderPayment) error) error {
	base := s.opts.APIBase
	if base == "" {
		base = "https://api.stripe.com"
	}
	after := ""
	for {
		q := url.Values{"limit": {"100"}, "created[gte]": {strconv.FormatInt(since.Unix(), 10)}, "expand[0]": {"data.latest_charge"}}
		if after != "" {
			q.Set("starting_after", after)
		}
		var page struct {
			Data []struct {
				ID       string            `json:"id"`
				Status   string            `json:"status"`
				Amount   int64             `json:"amount"`
				Currency string            `json:"currency"`
				Created  int64             `json:"created"`
				Metadata map[string]string `json:"metadata"`
				// LatestCharge is the expanded charge (an id alone when not expanded).
				LatestCharge json.RawMessage `json:"latest_charge"`
			} `json:"data"`
			HasMore bool `json:"has_more"`
		}
		if err := s.getJSON(ctx, strings.TrimRight(base, "/")+"/v1/payment_intents?"+q.Encode(), &page); err != nil {
			return fmt.Errorf("payment: list payments: %w", err)
		}
		for _, pi := range page.Data {
			pp := ProviderPayment{
				ID: pi.ID, Status: pi.Status, AmountCents: pi.Amount, Currency: pi.Currency,
				OrderID: pi.Metadata["order_id"], Attempt: pi.Metadata["flashsale_attempt"], Created: time.Unix(pi.Created, 0),
			}
			var ch struct {
				AmountRefunded int64 `json:"amount_refunded"`
				Disputed       bool  `json:"disputed"`
			}
			if len(pi.LatestCharge) > 0 && pi.LatestCharge[0] == '{' && json.Unmarshal(pi.LatestCharge, &ch) == nil {
				pp.RefundedCents, pp.Disputed = ch.AmountRefunded, ch.Disputed
			}
			if err := fn(pp); err != nil {
				return err
			}
			after = pi.ID
		}
		if !page.HasMore || len(page.Data) == 0 {
			return nil
		}
	}
}

// getJSON GETs an API URL with the secret key and decodes a 2xx reply into v; a 4xx is
// ErrRejected, anything else ErrUnavailable.
func (s *Stripe) getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.opts.SecretKey)
	req.Header.Set("Stripe-Version", stripe.APIVersion)
	res, err := s.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
		if res.StatusCode >= 400 && res.StatusCode < 500 {
			return fmt.Errorf("%w: %d %s", ErrRejected, res.StatusCode, body)
		}
		return fmt.Errorf("%w: %d %s", ErrUnavailable, res.StatusCode, body)
	}
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return nil
}
