package orders

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/lua"
)

// The payment scripts: attaching a provider's payment to an order, and recording its refund.
// Paying by a provider's word goes through payScript, the same path as the shopper's pay.
var (
	attachPaymentScript = lua.NewChange("attach_payment", "release.lua", "attach_payment.lua")
	refundPaymentScript = lua.NewChange("refund_payment", "release.lua", "refund_payment.lua")
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

// paymentIDOf is the payment id of a payments-hash record "payment id|state|event id".
func paymentIDOf(rec string) string {
	pid, _, _ := strings.Cut(rec, "|")
	return pid
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

// AttachPayment makes paymentID the caller's order's payment unless it has one: the returned
// order carries the payment id it has after the call (the earlier one, if any). An order that
// is not reserved is ErrInvalidState, a reservation whose time ran out ErrExpired (the order
// is returned alongside both), another user's order ErrNotFound.
func (s *Store) AttachPayment(ctx context.Context, user, id, paymentID string) (Order, error) {
	item, ok := keyspace.ItemOfOrder(id)
	if !ok || !keyspace.ValidID(user) {
		return Order{}, ErrNotFound
	}
	if !validPaymentID(paymentID) {
		return Order{}, fmt.Errorf("orders: attach payment %q: malformed payment id", paymentID)
	}
	k := s.keys.Item(item)
	res, err := attachPaymentScript.Run(ctx, s.rdb, []string{k.Orders(), k.Payments()},
		item, id, user, paymentID).Slice()
	if err != nil {
		return Order{}, fmt.Errorf("orders: attach payment to %s: %w", id, err)
	}
	if len(res) != 3 {
		return Order{}, fmt.Errorf("orders: attach payment to %s: %w", id, errReply)
	}
	outcome, _ := res[0].(string)
	o, err := s.replyOrder(id, item, outcome, res[1])
	if err != nil {
		return Order{}, fmt.Errorf("orders: attach payment to %s: %w", id, err)
	}
	switch outcome {
	case "attached":
		o.PaymentID, _ = res[2].(string)
		return o, nil
	case "order_expired":
		return o, fmt.Errorf("orders: attach payment to %s: %w", id, ErrExpired)
	case "invalid_state":
		return o, fmt.Errorf("orders: attach payment to %s (%s): %w", id, o.Status, ErrInvalidState)
	}
	return Order{}, fmt.Errorf("orders: attach payment to %s: unknown outcome %q: %w", id, outcome, errReply)
}

// SettlePayment applies a provider's "payment succeeded" (eventID names the event) to the
// payment's order, found through the payment index: the order becomes paid if still reserved
// and due later (SettledPaid), or the payment is marked for refund (SettledRefund); a payment
// settled before changes nothing (SettledBefore). A payment no checkout attached is
// ErrUnknownPayment. The returned order is the order after the call.
func (s *Store) SettlePayment(ctx context.Context, paymentID, eventID string) (Order, Settlement, error) {
	oid, err := s.OrderOfPayment(ctx, paymentID)
	if err != nil {
		return Order{}, "", err
	}
	item, ok := keyspace.ItemOfOrder(oid)
	if !ok || strings.Contains(eventID, "|") {
		return Order{}, "", ErrUnknownPayment
	}
	k := s.keys.Item(item)
	res, err := payScript.Run(ctx, s.rdb,
		[]string{k.Hash(), k.Orders(), k.Held(), k.PaidBy(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(), k.Payments()},
		item, oid, "", paymentID, eventID).Slice()
	if err != nil {
		return Order{}, "", fmt.Errorf("orders: settle payment %s of %s: %w", paymentID, oid, err)
	}
	if len(res) != 3 {
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
		if s.Hooks.PaidChanged != nil {
			paid, _ := res[2].(int64)
			s.Hooks.PaidChanged(ctx, item, paid)
		}
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
type PaymentState struct{ ID, State string }

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
		pid, rest, _ := strings.Cut(rec, "|")
		state, _, _ := strings.Cut(rest, "|")
		out[ids[i]] = PaymentState{ID: pid, State: state}
	}
	return out, nil
}

// OpenPaymentsOf returns the payment ids, among some orders of one item, that are still open
// although their order is no longer reserved (expired or cancelled): the payments to cancel at
// the provider.
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
		if state, _, _ := strings.Cut(rest, "|"); state != "open" {
			continue
		}
		packed, _ := recs.Val()[i].(string)
		if o, err := Unpack(ids[i], item, packed); err == nil && (o.Status == Expired || o.Status == Cancelled) {
			out = append(out, pid)
		}
	}
	return out, nil
}
