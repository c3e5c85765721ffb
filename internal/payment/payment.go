// Package payment owns taking money for orders: the payment provider (Stripe, the simulator
// that speaks Stripe's API, or none), checkout (one provider payment per order), the
// provider's webhooks (an order is paid only when the provider says so; a payment that
// succeeds too late is refunded) and cancelling the open payments of reservations that ended.
package payment

import (
	"context"
	"errors"
)

// Provider names, as FLASHSALE_PAYMENT_PROVIDER spells them.
const (
	ProviderSim    = "sim"
	ProviderStripe = "stripe"
	ProviderNone   = "none"
)

// Statuses of a payment, in Stripe's words.
const (
	StatusRequiresPaymentMethod = "requires_payment_method"
	StatusProcessing            = "processing"
	StatusSucceeded             = "succeeded"
	StatusCanceled              = "canceled"
)

// Event types the webhook acts on; every other type is acknowledged and ignored.
const (
	EventSucceeded = "payment_intent.succeeded"
	EventFailed    = "payment_intent.payment_failed"
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
	ErrRejected = errors.New("payment provider refused the request")
)

// Payment is a provider's payment as the contract shows it.
type Payment struct {
	ID           string `json:"id"`
	Provider     string `json:"provider"`
	Status       string `json:"status"`
	AmountCents  int64  `json:"amount_cents"`
	Currency     string `json:"currency"`
	ClientSecret string `json:"client_secret"`
	CheckoutURL  string `json:"checkout_url"`
	// OrderID is the order the provider's metadata names: informational only, never trusted.
	OrderID string `json:"-"`
}

// Event is one verified webhook event.
type Event struct {
	ID      string
	Type    string
	Payment Payment
}

// Provider is a payment provider. Every call is safe to repeat: creation and refunds carry
// idempotency keys derived from the order and the payment.
type Provider interface {
	// Name is the provider's name (ProviderSim, ProviderStripe).
	Name() string
	// CreatePayment creates the order's payment of amount cents, once per order
	// (Idempotency-Key checkout-<order id>): asking again returns the same payment.
	CreatePayment(ctx context.Context, orderID string, amountCents int64, currency string) (Payment, error)
	// GetPayment returns the payment's current state.
	GetPayment(ctx context.Context, id string) (Payment, error)
	// CancelPayment cancels a payment that has not succeeded (refused while processing).
	CancelPayment(ctx context.Context, id string) (Payment, error)
	// Refund refunds a succeeded payment in full, once (Idempotency-Key refund-<payment id>).
	Refund(ctx context.Context, paymentID string) error
	// VerifyWebhook checks a webhook's signature header and returns its event, or ErrBadSignature.
	VerifyWebhook(raw []byte, header string) (Event, error)
}
