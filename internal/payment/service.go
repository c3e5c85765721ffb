package payment

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/logging"
	"github.com/flashsale/flashsale/internal/orders"
)

// Service takes payment for orders through a Provider (nil: provider none).
type Service struct {
	Provider Provider
	Orders   *orders.Store
	Currency string // FLASHSALE_CURRENCY, e.g. "usd"
	// Hold is how long a processing payment holds its reservation past expires_at
	// (FLASHSALE_PAYMENT_PROCESSING_HOLD); a session lives at least that long past it.
	Hold time.Duration
	// ItemName names an item on the provider's page (nil or "": the item id).
	ItemName func(ctx context.Context, item string) string

	// Observe, when set, is told the result of every webhook delivery: applied (a verified
	// event applied or deliberately ignored), unknown (a payment this api has no record of),
	// foreign (the same, carrying no flashsale metadata: the account's other sales), refused
	// (no valid signature: 400) or retry (not applied yet: 503). The api counts them in
	// flashsale_payment_webhooks_total.
	Observe func(result string)

	cancels chan release
	orphans chan orphan
}

// Results of a webhook delivery, as Service.Observe is told them.
const (
	WebhookApplied = "applied"
	WebhookUnknown = "unknown"
	WebhookForeign = "foreign"
	WebhookRefused = "refused"
	WebhookRetry   = "retry"
	// WebhookMismatch: a succeeded payment whose amount or currency is not its order's (refunded);
	// told besides the delivery's own result.
	WebhookMismatch = "mismatch"
	// WebhookOrphanRefunded: a succeeded payment the api had no link to and whose metadata
	// names no order it can pay (refunded); told besides the delivery's own result.
	WebhookOrphanRefunded = "orphan_refunded"
)

// errUnknownWebhook: a verified event about a payment this api has no record of (answered
// 200, warned about and counted).
var errUnknownWebhook = errors.New("payment webhook: unknown payment")

// errForeignWebhook: a verified event about a payment this api has no record of and that
// carries no flashsale metadata: the account's other sales (answered 200 and counted).
var errForeignWebhook = errors.New("payment webhook: not a flashsale payment")

// errSettledElsewhere: a PaymentIntent's success whose payment its session's event settled.
var errSettledElsewhere = errors.New("payment webhook: settled by the session's event")

// webhookWarn rate-limits the warnings of refused and unknown deliveries: a flood of forged
// requests must not flood the log.
var webhookWarn = logging.NewThrottle(10 * time.Second)

// release is a batch of order ids of one item whose reservations ended (expired or cancelled).
type release struct {
	item string
	ids  []string
}

// orphan is an attempt whose creation the provider answered 5xx: it may have made the session
// anyway, to be found by its metadata and expired.
type orphan struct {
	attempt string
	since   time.Time
}

// DefaultHold is FLASHSALE_PAYMENT_PROCESSING_HOLD's default.
const DefaultHold = 30 * time.Minute

// Stripe's bounds on a Checkout Session's expires_at, from its creation.
const (
	sessionMinLife = 30 * time.Minute
	sessionMaxLife = 24 * time.Hour
)

// NewService returns a Service; call Run to have it end the open sessions of reservations
// that ended (Released is the orders hook that feeds it).
func NewService(p Provider, store *orders.Store, currency string) *Service {
	return &Service{Provider: p, Orders: store, Currency: currency, Hold: DefaultHold,
		cancels: make(chan release, 4096), orphans: make(chan orphan, 1024)}
}

// Enabled reports whether a provider takes payment (false: the shop settles outside).
func (s *Service) Enabled() bool { return s != nil && s.Provider != nil }

// newAttempt is a fresh attempt id: random, so it is unique across deployments, restores and
// attempts of one order, and so are the Idempotency-Keys derived from it.
func newAttempt() string { return "fsa_" + rand.Text() }

// Checkout returns the caller's reserved order with its payment attempt in force, opening a
// Checkout Session (success and cancel URLs back to shopURL) when it has none or the last ended.
// Errors: orders.ErrNotFound, orders.ErrInvalidState (not reserved), orders.ErrExpired,
// ErrNoProvider, a *Refusal, ErrUnavailable (unreachable or 5xx: nothing was changed).
func (s *Service) Checkout(ctx context.Context, user, orderID, shopURL string) (orders.Order, Payment, error) {
	if !s.Enabled() {
		return orders.Order{}, Payment{}, ErrNoProvider
	}
	o, err := s.Orders.Get(ctx, user, orderID)
	if err != nil {
		return orders.Order{}, Payment{}, err
	}
	if err := payable(o); err != nil {
		return o, Payment{}, err
	}
	replace := ""
	if o.PaymentID != "" {
		cs, err := s.Provider.GetCheckout(ctx, o.PaymentID)
		if err != nil {
			return o, Payment{}, unavailable(err)
		}
		ended, err := s.ended(ctx, cs)
		if err != nil {
			return o, Payment{}, unavailable(err)
		}
		if !ended {
			return o, s.payment(cs, o.PaymentStatus), nil
		}
		replace = cs.ID
	}
	o, a, err := s.Orders.BeginAttempt(ctx, user, orderID, newAttempt(), replace)
	if err != nil {
		return o, Payment{}, err
	}
	if a.PaymentID != "" && a.PaymentID != replace {
		// Another checkout of this order attached its session meanwhile.
		return s.current(ctx, o, a.PaymentID)
	}
	// The attempt is indexed before its session exists, so its PaymentIntent's events (which
	// carry only the metadata) find the order.
	if err := s.Orders.IndexPayment(ctx, a.ID, orderID); err != nil {
		return o, Payment{}, err
	}
	req := CheckoutRequest{
		OrderID: orderID, UserID: user, Attempt: a.ID, ItemName: s.itemName(ctx, o.ItemID),
		Quantity: o.Quantity, UnitAmount: o.PriceCents, Currency: s.Currency,
		SuccessURL: shopURL + "?checkout=success&order=" + url.QueryEscape(orderID) + "&session_id={CHECKOUT_SESSION_ID}",
		CancelURL:  shopURL + "?checkout=cancel&order=" + url.QueryEscape(orderID),
		ExpiresAt:  sessionExpiry(o.ExpiresAt, s.Hold, time.Now()),
	}
	cs, err := s.Provider.CreateCheckout(ctx, req)
	if err != nil {
		if errors.Is(err, ErrRejected) || errors.Is(err, errAnswered5xx) {
			// The provider keeps this answer under the attempt's key: the next checkout makes
			// a new attempt. A 5xx may have made the session anyway: it is found and expired.
			if aerr := s.Orders.AbandonAttempt(ctx, user, orderID, a.ID); aerr != nil {
				slog.Warn("payment: abandoning a refused checkout attempt failed", "order", orderID, "attempt", a.ID, "err", aerr)
			}
			if errors.Is(err, errAnswered5xx) {
				s.expireOrphan(orphan{attempt: a.ID, since: time.Now().Add(-time.Minute)})
			}
		}
		// Otherwise (no answer) the outcome is unknown: the attempt stays, and the next
		// checkout asks again under its key.
		return o, Payment{}, err
	}
	if err := s.Orders.IndexPayment(ctx, cs.ID, orderID); err != nil {
		return o, Payment{}, err
	}
	attached, now, err := s.Orders.AttachSession(ctx, user, orderID, a.ID, cs.ID)
	if err != nil {
		if errors.Is(err, orders.ErrExpired) || errors.Is(err, orders.ErrInvalidState) {
			// The reservation ended while the session was being made: nobody may pay it now.
			s.expireLater(cs.ID)
		}
		return attached, Payment{}, err
	}
	if now.PaymentID != cs.ID {
		// A concurrent checkout replaced this attempt: its session is the order's.
		s.expireLater(cs.ID)
		return s.current(ctx, attached, now.PaymentID)
	}
	attached.PaymentID, attached.PaymentStatus = cs.ID, PaymentOpen
	return attached, s.payment(cs, PaymentOpen), nil
}

// payable refuses an order that cannot be paid.
func payable(o orders.Order) error {
	switch {
	case o.Status == orders.Expired, o.Status == orders.Reserved && !time.Now().Before(o.ExpiresAt):
		return fmt.Errorf("payment: checkout %s: %w", o.ID, orders.ErrExpired)
	case o.Status != orders.Reserved:
		return fmt.Errorf("payment: checkout %s (%s): %w", o.ID, o.Status, orders.ErrInvalidState)
	}
	return nil
}

// current answers the order with the session another checkout attached.
func (s *Service) current(ctx context.Context, o orders.Order, sessionID string) (orders.Order, Payment, error) {
	if sessionID == "" {
		return o, Payment{}, fmt.Errorf("%w: another checkout of %s is being opened", ErrUnavailable, o.ID)
	}
	cs, err := s.Provider.GetCheckout(ctx, sessionID)
	if err != nil {
		return o, Payment{}, unavailable(err)
	}
	o.PaymentID = sessionID
	if o.PaymentStatus == "" {
		o.PaymentStatus = PaymentOpen
	}
	return o, s.payment(cs, o.PaymentStatus), nil
}

// ended reports whether a session can no longer be paid: it expired, or it completed and its
// debit failed.
func (s *Service) ended(ctx context.Context, cs Session) (bool, error) {
	switch {
	case cs.Status == "expired":
		return true, nil
	case cs.Status == "complete" && cs.PaymentStatus != "paid" && cs.PaymentIntent != "":
		st, err := s.Provider.PaymentStatus(ctx, cs.PaymentIntent)
		return err == nil && (st == StatusRequiresPaymentMethod || st == StatusCanceled), err
	}
	return false, nil
}

// sessionExpiry is a new session's expires_at: the reservation's end plus the processing
// hold, but at least Stripe's minimum from now (and at most its maximum).
func sessionExpiry(reservationEnd time.Time, hold time.Duration, now time.Time) time.Time {
	at := reservationEnd.Add(hold)
	if lo := now.Add(sessionMinLife + time.Minute); at.Before(lo) { // a minute for the trip and clocks
		at = lo
	}
	if hi := now.Add(sessionMaxLife - time.Minute); at.After(hi) {
		at = hi
	}
	return at
}

func (s *Service) itemName(ctx context.Context, item string) string {
	if s.ItemName != nil {
		if n := s.ItemName(ctx, item); n != "" {
			return n
		}
	}
	return item
}

// payment is the contract's Payment of a session; status is the order's payment_status.
func (s *Service) payment(cs Session, status string) Payment {
	p := Payment{ID: cs.ID, Provider: s.Provider.Name(), Status: status, AmountCents: cs.AmountTotal,
		Currency: cs.Currency, CheckoutURL: cs.URL}
	if cs.PaymentIntent != "" {
		p.PaymentIntent = &cs.PaymentIntent
	}
	if p.Status == "" {
		p.Status = PaymentOpen
	}
	return p
}

// unavailable makes a provider failure that is not a refusal ErrUnavailable for the caller.
func unavailable(err error) error {
	if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRejected) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// HandleWebhook verifies and applies one webhook delivery. It returns ErrBadSignature for a
// delivery to answer 400 (nothing changed); nil for every verified event, new, repeated, out
// of order, for an unknown payment or of an ignored type; any other error means "not
// handled yet" (the provider delivers it again).
func (s *Service) HandleWebhook(ctx context.Context, raw []byte, header string) error {
	err := s.handleWebhook(ctx, raw, header)
	result := WebhookApplied
	switch {
	case errors.Is(err, errUnknownWebhook):
		result, err = WebhookUnknown, nil
	case errors.Is(err, errForeignWebhook):
		result, err = WebhookForeign, nil
	case errors.Is(err, ErrBadSignature):
		result = WebhookRefused
		webhookWarn.Warn("payment webhook refused: no valid signature", "err", err)
	case err != nil:
		result = WebhookRetry
	}
	s.observe(result)
	return err
}

func (s *Service) observe(result string) {
	if s != nil && s.Observe != nil {
		s.Observe(result)
	}
}

func (s *Service) handleWebhook(ctx context.Context, raw []byte, header string) error {
	if !s.Enabled() {
		return ErrBadSignature // nothing is configured to verify it with
	}
	ev, err := s.Provider.VerifyWebhook(raw, header)
	if err != nil {
		return err
	}
	var status string
	succeeded := false
	switch ev.Type {
	case EventSessionCompleted:
		if ev.PaymentStatus == "paid" {
			succeeded = true
		} else {
			status = PaymentProcessing // an async method: the debit is on its way
		}
	case EventSessionAsyncSucceded, EventSucceeded:
		succeeded = true
	case EventSessionAsyncFailed, EventFailed:
		status = PaymentFailed
	case EventProcessing:
		status = PaymentProcessing
	case EventSessionExpired:
		status = PaymentCanceled
	case EventChargeRefunded, EventDisputeCreated:
		return s.chargeEvent(ctx, ev)
	default:
		return nil // not ours to act on
	}
	oid, sid, err := s.find(ctx, ev)
	if errors.Is(err, orders.ErrUnknownPayment) && succeeded {
		var adopted bool
		if oid, sid, adopted, err = s.adopt(ctx, ev); err == nil && !adopted {
			return s.refundOrphan(ctx, ev)
		}
		if errors.Is(err, errSettledElsewhere) {
			return nil
		}
	}
	if errors.Is(err, orders.ErrUnknownPayment) {
		return unknownPayment(ev)
	}
	if err != nil {
		return err
	}
	if !succeeded {
		return s.setStatus(ctx, ev, oid, sid, status)
	}
	if ev.PaymentIntent != "" {
		// The PaymentIntent's charge events (refunds, disputes) find the order by it.
		if err := s.Orders.IndexPayment(ctx, ev.PaymentIntent, oid); err != nil {
			return err
		}
	}
	amount := ev.AmountCents
	if ev.Currency != s.Currency {
		amount = -1 // another currency never pays an order
	}
	o, st, err := s.Orders.SettleAmount(ctx, sid, ev.PaymentIntent, ev.ID, amount)
	if errors.Is(err, orders.ErrUnknownPayment) {
		// Not the session in force of the order it was indexed to (another attempt replaced
		// it, or the link was lost): its metadata decides.
		var adopted bool
		if _, _, adopted, err = s.adopt(ctx, ev); err == nil && !adopted {
			return s.refundOrphan(ctx, ev)
		}
		if err == nil {
			o, st, err = s.Orders.SettleAmount(ctx, sid, ev.PaymentIntent, ev.ID, amount)
		}
		if errors.Is(err, errSettledElsewhere) {
			return nil
		}
	}
	if errors.Is(err, orders.ErrUnknownPayment) {
		return unknownPayment(ev)
	}
	if err != nil || st != orders.SettledRefund {
		return err
	}
	if ev.AmountCents != o.Quantity*o.PriceCents || ev.Currency != s.Currency {
		slog.Warn("payment webhook: a payment's amount or currency is not its order's; refunding it",
			"event", ev.ID, "order", o.ID, "session", sid, "amount_cents", ev.AmountCents, "currency", ev.Currency,
			"order_cents", o.Quantity*o.PriceCents, "order_currency", s.Currency)
		s.observe(WebhookMismatch)
	}
	// The order was expired or cancelled before the payment succeeded: give the money back.
	// A failure here leaves the payment marked refunding; the provider's next delivery of
	// this event (or of a duplicate) refunds again under the same Idempotency-Key.
	pi := ev.PaymentIntent
	if pi == "" {
		cs, err := s.Provider.GetCheckout(ctx, sid)
		if err != nil {
			return err
		}
		pi = cs.PaymentIntent
	}
	if err := s.Provider.Refund(ctx, pi); err != nil {
		return err
	}
	_, err = s.Orders.FinishRefund(ctx, o.ID, sid)
	return err
}

// setStatus records what an event says of a payment that has not succeeded (yet). Events come in
// any order and more than once, so a debit's event is checked against the PaymentIntent's status
// now: a late one never brings back a state the payment left. A debit on its way (processing,
// or succeeded with its event to come) holds the reservation; a failed one ends the hold.
func (s *Service) setStatus(ctx context.Context, ev Event, oid, sid, status string) error {
	// The session's async_payment_failed is its debit's final word: recorded as it says.
	if ev.PaymentIntent == "" || ev.Type == EventSessionAsyncFailed || (status != PaymentProcessing && status != PaymentFailed) {
		_, err := s.Orders.SetPaymentStatus(ctx, oid, sid, status)
		return err
	}
	now, err := s.intentStatus(ctx, ev.PaymentIntent)
	if err != nil {
		return err
	}
	switch {
	case now == "": // the provider no longer knows it: the event's word stands
	case now == StatusCanceled:
		return nil // the session's expiry says the attempt is over
	case status == PaymentFailed && now != StatusRequiresPaymentMethod:
		return nil // another try is on its way or succeeded since
	case status == PaymentProcessing && now == StatusRequiresPaymentMethod:
		status = PaymentFailed // the debit failed since
	}
	if _, err := s.Orders.SetPaymentStatus(ctx, oid, sid, status); err != nil || status != PaymentProcessing {
		return err
	}
	// The debit may have failed between the read above and the write, its failure event
	// applied in between and undone by this write: read again. Either this read sees the
	// failure, or the failure's own read comes later and its write lands after this one.
	if now, err = s.intentStatus(ctx, ev.PaymentIntent); err != nil || now != StatusRequiresPaymentMethod {
		return err
	}
	_, err = s.Orders.SetPaymentStatus(ctx, oid, sid, PaymentFailed)
	return err
}

// intentStatus is a PaymentIntent's status at the provider; "" when the provider refuses to
// say (it does not know it).
func (s *Service) intentStatus(ctx context.Context, paymentIntent string) (string, error) {
	st, err := s.Provider.PaymentStatus(ctx, paymentIntent)
	if errors.Is(err, ErrRejected) {
		return "", nil
	}
	return st, err
}

// unknownPayment answers a session's or PaymentIntent's event about a payment this api has no
// record of: foreign when it carries none of the metadata every flashsale checkout sets on
// both (the account's other sales: no alert), else unknown (warned about and alerted on).
func unknownPayment(ev Event) error {
	if ev.Metadata[MetaOrder] == "" && ev.Metadata[MetaUser] == "" && ev.Metadata[MetaAttempt] == "" {
		slog.Debug("payment webhook: not a flashsale payment, ignored", "event", ev.ID, "type", ev.Type)
		return errForeignWebhook
	}
	webhookWarn.Warn("payment webhook: unknown payment, ignored", "event", ev.ID, "type", ev.Type, "session", ev.SessionID, "payment_intent", ev.PaymentIntent)
	return errUnknownWebhook
}

// adopt attaches a succeeded payment this api lost the link to (docs/payments.md, "A success
// the api has no link to") to the order its metadata names, when that order can take it. Else:
// adopted false and no error (it pays no order: refund it), orders.ErrUnknownPayment (not this
// shop's: left alone), or errSettledElsewhere (another event of the payment decides).
func (s *Service) adopt(ctx context.Context, ev Event) (oid, sid string, adopted bool, err error) {
	oid, user, att := ev.Metadata[MetaOrder], ev.Metadata[MetaUser], ev.Metadata[MetaAttempt]
	if oid == "" || user == "" || att == "" {
		return "", "", false, orders.ErrUnknownPayment
	}
	// The shop's only if this deployment indexed its attempt to that order: the shop's other
	// sales on the account, or another deployment's, may carry the same order id, user and amount.
	if known, err := s.Orders.OrderOfPayment(ctx, att); errors.Is(err, orders.ErrUnknownPayment) || (err == nil && known != oid) {
		return "", "", false, orders.ErrUnknownPayment
	} else if err != nil {
		return "", "", false, err
	}
	o, err := s.Orders.Get(ctx, user, oid)
	if errors.Is(err, orders.ErrNotFound) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, err
	}
	fits := ev.Currency == s.Currency && ev.AmountCents == o.Quantity*o.PriceCents
	// A PaymentIntent's event refunds only what no session event can pay (an order gone, ended
	// or of another amount, which stays so); the same Idempotency-Key makes both refunds one.
	if ev.SessionID == "" {
		if known, err := s.Orders.OrderOfPayment(ctx, ev.PaymentIntent); err == nil && known == oid {
			return "", "", false, errSettledElsewhere // its session's event settled it
		}
		ended := o.Status == orders.Expired || o.Status == orders.Cancelled ||
			(o.Status == orders.Reserved && !time.Now().Before(o.ExpiresAt))
		if ended || !fits {
			return "", "", false, nil
		}
		return "", "", false, errSettledElsewhere // paid, refunded or payable: the session's event decides
	}
	if o.PaymentID == ev.SessionID {
		return oid, ev.SessionID, true, nil // a duplicate of this event adopted it meanwhile
	}
	if payable(o) != nil || !fits {
		return "", "", false, nil
	}
	if err := s.Orders.IndexPayment(ctx, ev.SessionID, oid); err != nil {
		return "", "", false, err
	}
	_, a, err := s.Orders.BeginAttempt(ctx, user, oid, att, "")
	if err == nil && a.ID == att && a.PaymentID == "" {
		_, a, err = s.Orders.AttachSession(ctx, user, oid, att, ev.SessionID)
	}
	if err != nil && !errors.Is(err, orders.ErrExpired) && !errors.Is(err, orders.ErrInvalidState) {
		return "", "", false, err
	}
	if err == nil && a.PaymentID == ev.SessionID {
		slog.Warn("payment webhook: a payment the api had lost the link to is attached to its order by its metadata",
			"event", ev.ID, "order", oid, "session", ev.SessionID, "attempt", att)
		return oid, ev.SessionID, true, nil
	}
	// Another attempt is in force, or the reservation ended just now; unless a duplicate of
	// this event attached it meanwhile, the payment pays nothing.
	if o, err = s.Orders.Get(ctx, user, oid); err != nil {
		return "", "", false, err
	}
	if o.PaymentID == ev.SessionID {
		return oid, ev.SessionID, true, nil
	}
	return "", "", false, nil
}

// refundOrphan refunds a succeeded payment that pays no order (its order is gone, ended, paid
// by another payment, or is another amount or currency), under the Idempotency-Key derived
// from its PaymentIntent: however many deliveries of its events, the money goes back once.
func (s *Service) refundOrphan(ctx context.Context, ev Event) error {
	pi := ev.PaymentIntent
	if pi == "" && ev.SessionID != "" {
		cs, err := s.Provider.GetCheckout(ctx, ev.SessionID)
		if err != nil {
			return err
		}
		pi = cs.PaymentIntent
	}
	if pi == "" {
		return errUnknownWebhook
	}
	if err := s.Provider.Refund(ctx, pi); errors.Is(err, ErrRejected) {
		// Refused for good (e.g. refunded already, or disputed): asking again changes
		// nothing; reconciler batch reports the payment if it still has no order.
		slog.Warn("payment webhook: refunding a payment for no payable order was refused",
			"event", ev.ID, "order", ev.Metadata[MetaOrder], "payment_intent", pi, "err", err)
		return nil
	} else if err != nil {
		return err
	}
	webhookWarn.Warn("payment webhook: a succeeded payment for no payable order was refunded",
		"event", ev.ID, "type", ev.Type, "order", ev.Metadata[MetaOrder], "session", ev.SessionID,
		"payment_intent", pi, "amount_cents", ev.AmountCents, "currency", ev.Currency)
	s.observe(WebhookOrphanRefunded)
	return nil
}

// find is the order and session an event is about: a session event by its session id (the
// checkout indexed it); a PaymentIntent event by its attempt (the metadata), whose order's
// session in force is the attempt's. ErrUnknownPayment when this shop has no such attempt.
func (s *Service) find(ctx context.Context, ev Event) (string, string, error) {
	if ev.SessionID != "" {
		oid, err := s.Orders.OrderOfPayment(ctx, ev.SessionID)
		return oid, ev.SessionID, err
	}
	att := ev.Metadata[MetaAttempt]
	if att == "" {
		return "", "", orders.ErrUnknownPayment
	}
	oid, err := s.Orders.OrderOfPayment(ctx, att)
	if err != nil {
		return "", "", err
	}
	if ev.Metadata[MetaOrder] != oid {
		return "", "", orders.ErrUnknownPayment
	}
	item, _ := keyspace.ItemOfOrder(oid)
	recs, err := s.Orders.PaymentsOf(ctx, item, []string{oid})
	if err != nil {
		return "", "", err
	}
	rec := recs[oid]
	if rec.Attempt != att || rec.ID == "" {
		return "", "", orders.ErrUnknownPayment
	}
	return oid, rec.ID, nil
}

// Released is the orders hook (orders.Hooks.Released): reservations of item ended; their
// open sessions are expired at the provider in the background. It never blocks: when the
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

func (s *Service) expireLater(sessionID string) {
	select {
	case s.cancels <- release{ids: []string{sessionID}}: // item "" means: ids are session ids
	default:
	}
}

func (s *Service) expireOrphan(o orphan) {
	select {
	case s.orphans <- o:
	default:
		slog.Warn("payment: orphan queue full, a checkout answered 5xx stays open until it expires", "attempt", o.attempt)
	}
}

// Run ends the open sessions of ended reservations, and those of attempts answered 5xx,
// until ctx ends. A session the provider could not be asked to end is asked again with
// backoff until it answers.
func (s *Service) Run(ctx context.Context) {
	if !s.Enabled() {
		return
	}
	warn := logging.NewThrottle(10 * time.Second)
	retry := map[string]time.Time{} // session id -> next try
	backoff := map[string]time.Duration{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	expire := func(sid string) {
		_, err := s.Provider.ExpireCheckout(ctx, sid)
		if err == nil || errors.Is(err, ErrRejected) {
			// Expired now, or no longer open (paid, processing or expired already): a payment
			// that succeeds later is refunded by the webhook.
			delete(retry, sid)
			delete(backoff, sid)
			return
		}
		b := min(max(2*backoff[sid], 500*time.Millisecond), time.Minute)
		backoff[sid], retry[sid] = b, time.Now().Add(b)
		warn.Warn("payment: ending an ended reservation's checkout failed; will retry", "session", sid, "err", err)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-s.cancels:
			sids := r.ids
			if r.item != "" {
				var err error
				if sids, err = s.Orders.OpenPaymentsOf(ctx, r.item, r.ids); err != nil {
					warn.Warn("payment: reading payments of ended reservations failed", "item", r.item, "err", err)
					continue
				}
			}
			for _, sid := range sids {
				expire(sid)
			}
		case o := <-s.orphans:
			found, err := s.Provider.FindCheckouts(ctx, o.attempt, o.since)
			if err != nil {
				warn.Warn("payment: looking for a checkout answered 5xx failed", "attempt", o.attempt, "err", err)
				continue
			}
			for _, cs := range found {
				slog.Info("payment: expiring the session of a checkout answered 5xx", "attempt", o.attempt, "session", cs.ID)
				expire(cs.ID)
			}
		case now := <-tick.C:
			for sid, at := range retry {
				if now.After(at) {
					expire(sid)
				}
			}
		}
	}
}

// chargeEvent applies charge.refunded (a refund made at the provider: in full, the paid order
// becomes refunded; in part, recorded) and charge.dispute.created (the payment is flagged
// disputed) to the order the charge's PaymentIntent paid.
func (s *Service) chargeEvent(ctx context.Context, ev Event) error {
	oid, sid, err := s.findCharge(ctx, ev)
	if errors.Is(err, orders.ErrUnknownPayment) {
		webhookWarn.Warn("payment webhook: unknown payment, ignored", "event", ev.ID, "type", ev.Type, "payment_intent", ev.PaymentIntent)
		return errUnknownWebhook
	}
	if err != nil {
		return err
	}
	switch ev.Type {
	case EventDisputeCreated:
		_, recorded, err := s.Orders.RecordDispute(ctx, oid, sid, ev.PaymentIntent)
		if recorded {
			slog.Warn("payment: a paid order's charge is disputed", "order", oid, "session", sid, "payment_intent", ev.PaymentIntent)
		}
		return ignoreSettled(err)
	default:
		full := ev.Refunded || (ev.AmountCents > 0 && ev.RefundedCents >= ev.AmountCents)
		_, _, err := s.Orders.RecordRefund(ctx, oid, sid, ev.PaymentIntent, ev.RefundedCents, full)
		return ignoreSettled(err)
	}
}

// ignoreSettled: a refund or dispute of an order that is not paid (its payment was the shop's
// own refund of an order it could not pay, or the order is gone) changes nothing and is done.
func ignoreSettled(err error) error {
	if errors.Is(err, orders.ErrInvalidState) || errors.Is(err, orders.ErrNotFound) {
		return nil
	}
	return err
}

// findCharge is the order and session of a charge's or dispute's PaymentIntent: by the index
// its success wrote, else by its metadata's attempt (as a PaymentIntent event).
func (s *Service) findCharge(ctx context.Context, ev Event) (string, string, error) {
	if ev.PaymentIntent == "" {
		return "", "", orders.ErrUnknownPayment
	}
	oid, err := s.Orders.OrderOfPayment(ctx, ev.PaymentIntent)
	if errors.Is(err, orders.ErrUnknownPayment) && ev.Metadata[MetaAttempt] != "" {
		return s.find(ctx, Event{PaymentIntent: ev.PaymentIntent, Metadata: ev.Metadata})
	}
	if err != nil {
		return "", "", err
	}
	item, _ := keyspace.ItemOfOrder(oid)
	recs, err := s.Orders.PaymentsOf(ctx, item, []string{oid})
	if err != nil {
		return "", "", err
	}
	if recs[oid].ID == "" {
		return "", "", orders.ErrUnknownPayment
	}
	return oid, recs[oid].ID, nil
}

// RefundOrder refunds a paid order in full through the provider under an admin's key (the same
// key again answers the refunded order), its units back on sale when restock; a duplicate or the
// provider's charge.refunded finds it refunded. Errors: orders.ErrNotFound, ErrNoProvider, a
// *Refusal, ErrUnavailable, orders.ErrInvalidState (unpaid, or refunded under another key).
func (s *Service) RefundOrder(ctx context.Context, orderID, key string, restock bool) (orders.Order, error) {
	if !s.Enabled() {
		return orders.Order{}, ErrNoProvider
	}
	o, sid, done, err := s.Orders.RequestRefund(ctx, orderID, key, restock)
	if err != nil {
		return o, err
	}
	if done {
		o.PaymentID, o.PaymentStatus = sid, "refunded"
		return o, nil
	}
	cs, err := s.Provider.GetCheckout(ctx, sid)
	if err != nil {
		return o, unavailable(err)
	}
	if cs.PaymentIntent == "" {
		return o, fmt.Errorf("payment: refund %s: session %s has no payment: %w", orderID, sid, orders.ErrInvalidState)
	}
	if err := s.Provider.Refund(ctx, cs.PaymentIntent); err != nil {
		var r *Refusal
		if !errors.As(err, &r) || r.Code != "charge_already_refunded" {
			if errors.As(err, &r) {
				if werr := s.Orders.WithdrawRefund(ctx, orderID, key); werr != nil {
					slog.Warn("payment: withdrawing a refused refund failed", "order", orderID, "err", werr)
				}
			}
			return o, unavailable(err)
		}
		// Refunded at the provider already (its charge.refunded may not have come yet).
	}
	o, _, err = s.Orders.RecordRefund(ctx, orderID, sid, cs.PaymentIntent, o.Quantity*o.PriceCents, true)
	if err != nil {
		return o, err
	}
	if o.Status != orders.Refunded {
		return o, fmt.Errorf("payment: refund %s left it %s: %w", orderID, o.Status, orders.ErrInvalidState)
	}
	o.PaymentID, o.PaymentStatus = sid, "refunded"
	return o, nil
}
