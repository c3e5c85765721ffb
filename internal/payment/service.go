package payment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/flashsale/flashsale/internal/logging"
	"github.com/flashsale/flashsale/internal/orders"
)

// Service takes payment for orders through a Provider (nil: provider none).
type Service struct {
	Provider Provider
	Orders   *orders.Store
	Currency string // FLASHSALE_CURRENCY, e.g. "usd"

	cancels chan release
}

// release is a batch of order ids of one item whose reservations ended (expired or cancelled).
type release struct {
	item string
	ids  []string
}

// NewService returns a Service; call Run to have it cancel the open payments of reservations
// that ended (Released is the orders hook that feeds it).
func NewService(p Provider, store *orders.Store, currency string) *Service {
	return &Service{Provider: p, Orders: store, Currency: currency, cancels: make(chan release, 4096)}
}

// Enabled reports whether a provider takes payment (false: the shop settles outside).
func (s *Service) Enabled() bool { return s != nil && s.Provider != nil }

// Checkout returns the caller's reserved order with its one payment at the provider, creating
// it on the first call. Errors: orders.ErrNotFound (another user's order), ErrInvalidState
// (not reserved), ErrExpired (its time ran out), ErrNoProvider, ErrUnavailable (the provider
// could not be reached: nothing was changed).
func (s *Service) Checkout(ctx context.Context, user, orderID string) (orders.Order, Payment, error) {
	if !s.Enabled() {
		return orders.Order{}, Payment{}, ErrNoProvider
	}
	o, err := s.Orders.Get(ctx, user, orderID)
	if err != nil {
		return orders.Order{}, Payment{}, err
	}
	switch {
	case o.Status == orders.Expired, o.Status == orders.Reserved && !time.Now().Before(o.ExpiresAt):
		return o, Payment{}, fmt.Errorf("payment: checkout %s: %w", orderID, orders.ErrExpired)
	case o.Status != orders.Reserved:
		return o, Payment{}, fmt.Errorf("payment: checkout %s (%s): %w", orderID, o.Status, orders.ErrInvalidState)
	}
	if o.PaymentID != "" {
		p, err := s.Provider.GetPayment(ctx, o.PaymentID)
		if err != nil {
			return o, Payment{}, unavailable(err)
		}
		return o, p, nil
	}
	p, err := s.Provider.CreatePayment(ctx, orderID, o.Quantity*o.PriceCents, s.Currency)
	if err != nil {
		return o, Payment{}, unavailable(err)
	}
	// The index first: once the shopper holds the payment's client secret (after this reply)
	// its webhook must find the order.
	if err := s.Orders.IndexPayment(ctx, p.ID, orderID); err != nil {
		return o, Payment{}, err
	}
	attached, err := s.Orders.AttachPayment(ctx, user, orderID, p.ID)
	if err != nil {
		if errors.Is(err, orders.ErrExpired) || errors.Is(err, orders.ErrInvalidState) {
			// The reservation ended while the payment was being made: nobody can pay it now.
			s.cancelLater(p.ID)
		}
		return attached, Payment{}, err
	}
	if attached.PaymentID != p.ID {
		// An earlier checkout attached another payment (the provider forgot the idempotency
		// key): the order keeps its first one, and this one is cancelled.
		s.cancelLater(p.ID)
		if p, err = s.Provider.GetPayment(ctx, attached.PaymentID); err != nil {
			return attached, Payment{}, unavailable(err)
		}
	}
	return attached, p, nil
}

// unavailable makes every provider failure ErrUnavailable for the caller (a 4xx the provider
// gave stays in the message, for the log).
func unavailable(err error) error {
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// HandleWebhook verifies and applies one webhook delivery. It returns ErrBadSignature for a
// delivery to answer 400 (nothing changed); nil for every verified event, new, repeated, out
// of order, for an unknown payment or of an ignored type; any other error means "not
// handled yet" (the provider delivers it again).
func (s *Service) HandleWebhook(ctx context.Context, raw []byte, header string) error {
	if !s.Enabled() {
		return ErrBadSignature // nothing is configured to verify it with
	}
	ev, err := s.Provider.VerifyWebhook(raw, header)
	if err != nil {
		return err
	}
	if ev.Type != EventSucceeded {
		// payment_failed: nothing changes, the shopper may try again until the reservation
		// ends; every other type is not ours to act on.
		return nil
	}
	o, st, err := s.Orders.SettlePayment(ctx, ev.Payment.ID, ev.ID)
	if errors.Is(err, orders.ErrUnknownPayment) {
		slog.Info("payment webhook: unknown payment, ignored", "event", ev.ID, "payment", ev.Payment.ID)
		return nil
	}
	if err != nil {
		return err
	}
	if st != orders.SettledRefund {
		return nil
	}
	// The order was expired or cancelled before the payment succeeded: give the money back.
	// A failure here leaves the payment marked refunding; the provider's next delivery of
	// this event (or of a duplicate) refunds again under the same Idempotency-Key.
	if err := s.Provider.Refund(ctx, ev.Payment.ID); err != nil {
		return err
	}
	if _, err := s.Orders.FinishRefund(ctx, o.ID, ev.Payment.ID); err != nil {
		return err
	}
	return nil
}

// Released is the orders hook (orders.Hooks.Released): reservations of item ended; their
// open payments are cancelled at the provider in the background. It never blocks: when the
// queue is full the batch is dropped (the payment then stays open at the provider, and a late
// success is refunded like any other).
func (s *Service) Released(item string, ids []string) {
	if !s.Enabled() {
		return
	}
	select {
	case s.cancels <- release{item: item, ids: ids}:
	default:
		slog.Warn("payment: cancel queue full, open payments of ended reservations stay open", "item", item, "orders", len(ids))
	}
}

func (s *Service) cancelLater(paymentID string) {
	select {
	case s.cancels <- release{ids: []string{paymentID}}: // item "" means: ids are payment ids
	default:
	}
}

// Run cancels the open payments of ended reservations until ctx ends.
func (s *Service) Run(ctx context.Context) {
	if !s.Enabled() {
		return
	}
	warn := logging.NewThrottle(10 * time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-s.cancels:
			pids := r.ids
			if r.item != "" {
				var err error
				if pids, err = s.Orders.OpenPaymentsOf(ctx, r.item, r.ids); err != nil {
					warn.Warn("payment: reading payments of ended reservations failed", "item", r.item, "err", err)
					continue
				}
			}
			for _, pid := range pids {
				s.cancel(ctx, pid, warn)
			}
		}
	}
}

// cancel cancels one payment, retrying a provider that is unavailable a few times. A refusal
// (it is processing, succeeded or already cancelled) is final: a payment that succeeds later
// is refunded by the webhook.
func (s *Service) cancel(ctx context.Context, pid string, warn *logging.Throttle) {
	wait := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		_, err := s.Provider.CancelPayment(ctx, pid)
		if err == nil || errors.Is(err, ErrRejected) {
			return
		}
		if attempt == 4 || ctx.Err() != nil {
			warn.Warn("payment: cancelling an ended reservation's payment failed", "payment", pid, "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait *= 2
	}
}
