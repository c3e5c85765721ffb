package orders

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/keyspace"
)

// ErrUnknownPayment means a payment id that no checkout attached to an order (or to this order).
var ErrUnknownPayment = errors.New("orders: unknown payment")

// Settlement is what a provider's "payment succeeded" did to its order.
type Settlement string

const (
	// SettledPaid: the payment paid its reserved order (order.paid, with the payment id).
	SettledPaid Settlement = "paid"
	// SettledRefund: the order was expired or cancelled; the payment is marked refunding and
	// must be refunded at the provider, then recorded with FinishRefund.
	SettledRefund Settlement = "refund"
	// SettledBefore: the payment had settled before (a repeated or late event); nothing changed.
	SettledBefore Settlement = "duplicate"
)

// paymentOf is the payment id and the contract's payment_status of a payments-hash record
// "payment id|state|event id|attempt" ("", "" for none, or an attempt still being created).
func paymentOf(rec string) (string, string) {
	pid, rest, _ := strings.Cut(rec, "|")
	state, _, _ := strings.Cut(rest, "|")
	if pid == "" {
		return "", ""
	}
	return pid, paymentStatusWord(state)
}

// paymentStatusWord maps a record's state to the contract's payment_status.
func paymentStatusWord(state string) string {
	switch state {
	case "paid":
		return "succeeded"
	case "refunding", "refunded":
		return "refunded"
	case "":
		return ""
	}
	return state // open, processing, failed, canceled, disputed
}

// validPaymentID reports whether id can be a provider's payment id: 1-255 of [A-Za-z0-9_].
func validPaymentID(id string) bool {
	if len(id) < 1 || len(id) > 255 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
		if !ok {
			return false
		}
	}
	return true
}

// paymentIndexTTL keeps a payment findable far longer than any provider retries a webhook
// (Stripe: up to three days), and as long as the order's own record is kept by default.
const paymentIndexTTL = 30 * 24 * time.Hour

// IndexPayment records payment id -> order id, the index a webhook finds the order by. It is
// written before the payment is attached (AttachPayment), so no payment of an order can be
// confirmed before its webhook can find it. Writing it again for the same order is a no-op; a
// payment id already indexed to another order is an error (a provider bug: never overwritten).
func (s *Store) IndexPayment(ctx context.Context, paymentID, orderID string) error {
	if !validPaymentID(paymentID) {
		return fmt.Errorf("orders: index payment %q: malformed payment id", paymentID)
	}
	key := s.keys.PaymentOrder(paymentID)
	ok, err := s.rdb.SetNX(ctx, key, orderID, paymentIndexTTL).Result()
	if err != nil {
		return fmt.Errorf("orders: index payment %s: %w", paymentID, err)
	}
	if ok {
		return nil
	}
	cur, err := s.rdb.Get(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("orders: index payment %s: %w", paymentID, err)
	}
	if cur != orderID {
		return fmt.Errorf("orders: payment %s is indexed to order %s, not %s", paymentID, cur, orderID)
	}
	return nil
}

// OrderOfPayment returns the order a checkout indexed the payment to; ErrUnknownPayment when none.
func (s *Store) OrderOfPayment(ctx context.Context, paymentID string) (string, error) {
	if !validPaymentID(paymentID) {
		return "", ErrUnknownPayment
	}
	oid, err := s.rdb.Get(ctx, s.keys.PaymentOrder(paymentID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", ErrUnknownPayment
	}
	if err != nil {
		return "", fmt.Errorf("orders: payment %s: %w", paymentID, err)
	}
	return oid, nil
}

// Attempt is an order's checkout attempt as recorded beside it.
type Attempt struct {
	ID        string // the attempt's id (metadata flashsale_attempt; its Idempotency-Keys derive from it)
	PaymentID string // its Checkout Session, "" while it is being created
}

// BeginAttempt records a new checkout attempt of the caller's reserved order before the
// provider makes its session, replacing replace (a session that ended; "" for none). It returns
// the attempt in force: this one, an earlier one of unknown outcome (PaymentID "": ask again
// under its key), or another checkout's (PaymentID set). Errors as AttachSession.
func (s *Store) BeginAttempt(ctx context.Context, user, id, attempt, replace string) (Order, Attempt, error) {
	return s.attempt(ctx, "begin", user, id, attempt, replace)
}

// AttachSession records the session the provider made for the attempt: the returned attempt
// is the one in force (another, when a concurrent checkout replaced this attempt). An order
// that is not reserved is ErrInvalidState, a reservation whose time ran out ErrExpired (the
// order is returned alongside both), another user's order ErrNotFound.
func (s *Store) AttachSession(ctx context.Context, user, id, attempt, sessionID string) (Order, Attempt, error) {
	return s.attempt(ctx, "attach", user, id, attempt, sessionID)
}

// AbandonAttempt forgets an attempt whose creation the provider refused or answered 5xx, so
// the next checkout makes a new one under a new key. Any other record is left alone.
func (s *Store) AbandonAttempt(ctx context.Context, user, id, attempt string) error {
	_, _, err := s.attempt(ctx, "abandon", user, id, attempt, "")
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// AttachPayment makes paymentID the caller's order's payment unless it has one, under an
// attempt named after the payment (tools and tests that make sessions themselves).
func (s *Store) AttachPayment(ctx context.Context, user, id, paymentID string) (Order, error) {
	o, a, err := s.BeginAttempt(ctx, user, id, "att_"+paymentID, "")
	if err != nil || a.PaymentID != "" {
		o.PaymentID = a.PaymentID
		return o, err
	}
	o, a, err = s.AttachSession(ctx, user, id, a.ID, paymentID)
	o.PaymentID = a.PaymentID
	return o, err
}

func (s *Store) attempt(ctx context.Context, mode, user, id, attempt, paymentID string) (Order, Attempt, error) {
	item, ok := keyspace.ItemOfOrder(id)
	if !ok || !keyspace.ValidID(user) {
		return Order{}, Attempt{}, ErrNotFound
	}
	if !validPaymentID(attempt) || (paymentID != "" && !validPaymentID(paymentID)) {
		return Order{}, Attempt{}, fmt.Errorf("orders: %s attempt %q (payment %q): malformed id", mode, attempt, paymentID)
	}
	k := s.keys.Item(item)
	res, err := attachPaymentScript.Run(ctx, s.rdb, []string{k.Orders(), k.Payments(), k.Outbox()},
		item, id, user, mode, attempt, paymentID).Slice()
	if err != nil {
		return Order{}, Attempt{}, fmt.Errorf("orders: %s attempt on %s: %w", mode, id, err)
	}
	if len(res) != 4 {
		return Order{}, Attempt{}, fmt.Errorf("orders: %s attempt on %s: %w", mode, id, errReply)
	}
	outcome, _ := res[0].(string)
	if outcome == "abandoned" {
		return Order{}, Attempt{}, nil
	}
	o, err := s.replyOrder(id, item, outcome, res[1])
	if err != nil {
		return Order{}, Attempt{}, fmt.Errorf("orders: %s attempt on %s: %w", mode, id, err)
	}
	a := Attempt{}
	a.PaymentID, _ = res[2].(string)
	a.ID, _ = res[3].(string)
	switch outcome {
	case "creating", "attached":
		return o, a, nil
	case "order_expired":
		return o, a, fmt.Errorf("orders: %s attempt on %s: %w", mode, id, ErrExpired)
	case "invalid_state":
		return o, a, fmt.Errorf("orders: %s attempt on %s (%s): %w", mode, id, o.Status, ErrInvalidState)
	}
	return Order{}, Attempt{}, fmt.Errorf("orders: %s attempt on %s: unknown outcome %q: %w", mode, id, outcome, errReply)
}

// SetPaymentStatus records the provider's word on the order's unsettled session (open,
// processing, failed, canceled) and reports whether the record changed; a settled payment,
// another attempt's session or an unknown order change nothing. A failed processing debit ends
// the hold: a reservation past its expires_at is due for expiry at once.
func (s *Store) SetPaymentStatus(ctx context.Context, orderID, sessionID, status string) (bool, error) {
	item, ok := keyspace.ItemOfOrder(orderID)
	if !ok || !validPaymentID(sessionID) {
		return false, ErrUnknownPayment
	}
	k := s.keys.Item(item)
	n, err := paymentStatusScript.Run(ctx, s.rdb, []string{k.Payments(), k.Orders(), k.Expiry()},
		item, orderID, sessionID, status).Int64()
	if err != nil {
		return false, fmt.Errorf("orders: payment status of %s: %w", orderID, err)
	}
	return n == 1, nil
}

// SettlePayment applies a provider's "payment succeeded" (eventID) to the order the payment
// index names: paid if still reserved and due later (SettledPaid), else the payment is marked
// for refund (SettledRefund); once settled, nothing changes (SettledBefore). A payment no
// checkout attached is ErrUnknownPayment. It returns the order after the call.
func (s *Store) SettlePayment(ctx context.Context, paymentID, eventID string) (Order, Settlement, error) {
	return s.settle(ctx, paymentID, eventID, "", "")
}

// SettleAmount is SettlePayment for a payment of amountCents in the shop's currency: an amount
// that is not the order's (quantity × price_cents), or a negative one (another currency), does
// not pay the order; the payment is marked for refund (SettledRefund). paymentIntent ("" when
// unknown) goes into order.paid with the attempt.
func (s *Store) SettleAmount(ctx context.Context, paymentID, paymentIntent, eventID string, amountCents int64) (Order, Settlement, error) {
	return s.settle(ctx, paymentID, eventID, strconv.FormatInt(amountCents, 10), paymentIntent)
}

func (s *Store) settle(ctx context.Context, paymentID, eventID, amount, paymentIntent string) (Order, Settlement, error) {
	oid, err := s.OrderOfPayment(ctx, paymentID)
	if err != nil {
		return Order{}, "", err
	}
	item, ok := keyspace.ItemOfOrder(oid)
	if !ok || strings.Contains(eventID, "|") || strings.Contains(paymentIntent, "|") {
		return Order{}, "", ErrUnknownPayment
	}
	k := s.keys.Item(item)
	res, err := payScript.Run(ctx, s.rdb,
		[]string{k.Hash(), k.Orders(), k.Held(), k.PaidBy(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(), k.Payments()},
		item, oid, "", paymentID, eventID, s.PaymentHold.Milliseconds(), amount, paymentIntent).Slice()
	if err != nil {
		return Order{}, "", fmt.Errorf("orders: settle payment %s of %s: %w", paymentID, oid, err)
	}
	if len(res) < 3 {
		return Order{}, "", fmt.Errorf("orders: settle payment %s: %w", paymentID, errReply)
	}
	outcome, _ := res[0].(string)
	if outcome == "not_found" {
		return Order{}, "", ErrUnknownPayment
	}
	o, err := s.replyOrder(oid, item, outcome, res[1])
	if err != nil {
		return Order{}, "", fmt.Errorf("orders: settle payment %s: %w", paymentID, err)
	}
	o.PaymentID = paymentID
	switch outcome {
	case "paid":
		s.soldChanged(ctx, item, res)
		return o, SettledPaid, nil
	case "refund":
		if o.Status == Expired {
			s.stockReturned(item) // possibly expired by this very call
		}
		return o, SettledRefund, nil
	case "duplicate":
		return o, SettledBefore, nil
	}
	return Order{}, "", fmt.Errorf("orders: settle payment %s: unknown outcome %q: %w", paymentID, outcome, errReply)
}

// FinishRefund records that the provider refunded the order's payment that SettlePayment
// marked for refund, publishing payment.refunded. It reports whether this call recorded it
// (false: recorded before, or the payment is not refunding).
func (s *Store) FinishRefund(ctx context.Context, orderID, paymentID string) (bool, error) {
	item, ok := keyspace.ItemOfOrder(orderID)
	if !ok || !validPaymentID(paymentID) {
		return false, ErrUnknownPayment
	}
	k := s.keys.Item(item)
	n, err := refundPaymentScript.Run(ctx, s.rdb, []string{k.Orders(), k.Payments(), k.Outbox()},
		item, orderID, paymentID).Int64()
	if err != nil {
		return false, fmt.Errorf("orders: finish refund of %s: %w", paymentID, err)
	}
	return n == 1, nil
}

// PaymentState is an order's payment as recorded beside it: its id and how far it got (open,
// paid, refunding, refunded); zero when the order has none.
type PaymentState struct{ ID, State, Attempt string }

// PaymentsOf returns the recorded payments of some orders of one item (ids of other items or
// orders without a payment are left out).
func (s *Store) PaymentsOf(ctx context.Context, item string, ids []string) (map[string]PaymentState, error) {
	out := map[string]PaymentState{}
	if len(ids) == 0 {
		return out, nil
	}
	vals, err := s.rdb.HMGet(ctx, s.keys.Item(item).Payments(), ids...).Result()
	if err != nil {
		return nil, fmt.Errorf("orders: payments of %s: %w", item, err)
	}
	for i, v := range vals {
		rec, ok := v.(string)
		if !ok {
			continue
		}
		f := strings.SplitN(rec, "|", 4)
		st := PaymentState{ID: f[0]}
		if len(f) > 1 {
			st.State = f[1]
		}
		if len(f) > 3 {
			st.Attempt = f[3]
		}
		out[ids[i]] = st
	}
	return out, nil
}

// OpenPaymentsOf returns the sessions, among some orders of one item, that are still open at
// the provider (open, or failed: a declined card leaves the session payable) although their
// order is no longer reserved (expired or cancelled): the sessions to expire at the provider.
func (s *Store) OpenPaymentsOf(ctx context.Context, item string, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	k := s.keys.Item(item)
	pipe := s.rdb.Pipeline()
	recs := pipe.HMGet(ctx, k.Orders(), ids...)
	pays := pipe.HMGet(ctx, k.Payments(), ids...)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("orders: open payments of %s: %w", item, err)
	}
	var out []string
	for i, v := range pays.Val() {
		rec, ok := v.(string)
		if !ok {
			continue
		}
		pid, rest, _ := strings.Cut(rec, "|")
		if state, _, _ := strings.Cut(rest, "|"); pid == "" || (state != "open" && state != "failed") {
			continue
		}
		packed, _ := recs.Val()[i].(string)
		if o, err := Unpack(ids[i], item, packed); err == nil && (o.Status == Expired || o.Status == Cancelled) {
			out = append(out, pid)
		}
	}
	return out, nil
}
