// Package payment owns taking money for orders: the provider (Stripe, the simulator, or none),
// checkout (one Checkout Session per attempt), the provider's webhooks (an order is paid only
// when the provider says so; a success that comes too late is refunded) and ending the open
// sessions of reservations that ended.
package payment

import (
	"context"
	"errors"
	"time"
)

// Provider names, as FLASHSALE_PAYMENT_PROVIDER spells them.
const (
	ProviderSim    = "sim"
	ProviderStripe = "stripe"
	ProviderNone   = "none"
)

// Statuses of a PaymentIntent, in Stripe's words.
const (
	StatusRequiresPaymentMethod = "requires_payment_method"
	StatusProcessing            = "processing"
	StatusSucceeded             = "succeeded"
	StatusCanceled              = "canceled"
)

// A payment attempt's status as the contract's Order.payment_status and Payment.status say it.
const (
	PaymentOpen       = "open"
	PaymentProcessing = "processing"
	PaymentSucceeded  = "succeeded"
	PaymentFailed     = "failed"
	PaymentCanceled   = "canceled"
)

// Event types the webhook acts on; every other type is acknowledged and ignored.
const (
	EventSessionCompleted     = "checkout.session.completed"
	EventSessionAsyncSucceded = "checkout.session.async_payment_succeeded"
	EventSessionAsyncFailed   = "checkout.session.async_payment_failed"
	EventSessionExpired       = "checkout.session.expired"
	EventSucceeded            = "payment_intent.succeeded"
	EventFailed               = "payment_intent.payment_failed"
	EventProcessing           = "payment_intent.processing"
	EventChargeRefunded       = "charge.refunded"
	EventDisputeCreated       = "charge.dispute.created"
)

// Metadata keys flashsale puts on every session and its PaymentIntent.
const (
	MetaOrder   = "order_id"
	MetaUser    = "user_id"
	MetaAttempt = "flashsale_attempt"
)

// Sentinel errors.
var (
	// ErrUnavailable: the provider could not be reached or answered 5xx; the call may be retried.
	ErrUnavailable = errors.New("payment provider unavailable")
	// ErrBadSignature: a webhook without a valid signature under any configured secret, or
	// signed more than the tolerance away from now.
	ErrBadSignature = errors.New("webhook signature missing, invalid or out of tolerance")
	// ErrNoProvider: the shop settles payment outside (provider none).
	ErrNoProvider = errors.New("no payment provider is configured")
	// ErrRejected: the provider refused the request (4xx): it will not succeed by retrying.
	// Wrapped in a *Refusal that carries the provider's reason.
	ErrRejected = errors.New("payment provider refused the request")
	// errAnswered5xx marks an ErrUnavailable whose request the provider answered with a 5xx: it
	// stores that answer under the request's Idempotency-Key, so retrying the key cannot help.
	errAnswered5xx = errors.New("the provider answered 5xx")
)

// Refusal is a provider's permanent refusal (ErrRejected) with its reason.
type Refusal struct {
	Status int    // the provider's HTTP status
	Code   string // its error code, e.g. amount_too_small
	Reason string // its message, shown to the shopper
}

func (r *Refusal) Error() string { return ErrRejected.Error() + ": " + r.Reason }

// Unwrap makes a Refusal ErrRejected for errors.Is.
func (r *Refusal) Unwrap() error { return ErrRejected }

// Payment is an order's payment attempt as the contract shows it.
type Payment struct {
	ID            string  `json:"id"`             // the Checkout Session's id (cs_…)
	PaymentIntent *string `json:"payment_intent"` // null until the shopper submits
	Provider      string  `json:"provider"`
	Status        string  `json:"status"` // the words of Order.payment_status
	AmountCents   int64   `json:"amount_cents"`
	Currency      string  `json:"currency"`
	CheckoutURL   string  `json:"checkout_url"`
	ClientSecret  *string `json:"client_secret"` // always null (deprecated)
}

// Session is a provider's Checkout Session.
type Session struct {
	ID            string
	PaymentIntent string // "" until the shopper submits
	Status        string // open, complete, expired
	PaymentStatus string // paid, unpaid
	URL           string
	AmountTotal   int64
	Currency      string
	Metadata      map[string]string
	ExpiresAt     time.Time
}

// CheckoutRequest is one payment attempt to open at the provider.
type CheckoutRequest struct {
	OrderID, UserID, Attempt string
	ItemName                 string
	Quantity, UnitAmount     int64 // cents
	Currency                 string
	SuccessURL, CancelURL    string
	ExpiresAt                time.Time
}

// Event is one verified webhook event: its object is a Checkout Session (SessionID set), a
// PaymentIntent, a charge or a dispute (SessionID "", PaymentIntent the payment's).
type Event struct {
	ID, Type      string
	SessionID     string
	PaymentIntent string
	// Status is the object's status (a session's open/complete/expired, a PaymentIntent's);
	// PaymentStatus a session's paid/unpaid.
	Status, PaymentStatus string
	AmountCents           int64
	Currency              string
	Metadata              map[string]string
	// RefundedCents and Refunded are a charge's amount_refunded and refunded (in full).
	RefundedCents int64
	Refunded      bool
}

// Provider is a payment provider speaking Stripe's API. Every change carries an
// Idempotency-Key derived from the attempt (never from the order id alone, which another
// deployment or a restore reuses) or from the object it changes.
type Provider interface {
	// Name is the provider's name (ProviderSim, ProviderStripe).
	Name() string
	// CreateCheckout opens the attempt's Checkout Session (Idempotency-Key checkout-<attempt>:
	// asking again returns the same session).
	CreateCheckout(ctx context.Context, r CheckoutRequest) (Session, error)
	// GetCheckout returns the session's current state.
	GetCheckout(ctx context.Context, id string) (Session, error)
	// ExpireCheckout ends an open session (ErrRejected when it is no longer open).
	ExpireCheckout(ctx context.Context, id string) (Session, error)
	// FindCheckouts returns the open sessions made since since whose metadata names attempt.
	FindCheckouts(ctx context.Context, attempt string, since time.Time) ([]Session, error)
	// PaymentStatus returns a PaymentIntent's status.
	PaymentStatus(ctx context.Context, paymentIntent string) (string, error)
	// Refund refunds a succeeded PaymentIntent in full, once (Idempotency-Key refund-<id>).
	Refund(ctx context.Context, paymentIntent string) error
	// VerifyWebhook checks a webhook's signature header and returns its event, or ErrBadSignature.
	VerifyWebhook(raw []byte, header string) (Event, error)
}

// minCharge is Stripe's minimum charge per currency, in the currency's smallest unit (its
// "minimum and maximum charge amounts"); currencies not listed have none here.
var minCharge = map[string]int64{
	"usd": 50, "aed": 200, "aud": 50, "bgn": 100, "brl": 50, "cad": 50, "chf": 50, "czk": 1500,
	"dkk": 250, "eur": 50, "gbp": 30, "hkd": 400, "huf": 17500, "inr": 50, "jpy": 50, "mxn": 1000,
	"myr": 200, "nok": 300, "nzd": 50, "pln": 200, "ron": 200, "sek": 300, "sgd": 50, "thb": 1000,
}

// MinCharge is the smallest amount the provider charges in currency (0: no minimum known). A
// price under it is refused when the item is saved, not at the shopper's checkout.
func MinCharge(currency string) int64 { return minCharge[currency] }
