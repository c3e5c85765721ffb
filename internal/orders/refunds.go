package orders

import (
	"context"
	"fmt"
	"strconv"

	"github.com/flashsale/flashsale/internal/keyspace"
)

// Refund outcomes of the refund script.
const (
	refundApplied   = "refunded"
	refundRequested = "requested"
	refundRecorded  = "recorded"
	refundDuplicate = "duplicate"
)

// refundCall is one run of refund_order.lua.
type refundCall struct {
	mode, orderID, paymentID, paymentIntent, key string
	cents                                        int64
	restock                                      bool
}

func (s *Store) refundOrder(ctx context.Context, c refundCall) (Order, string, error) {
	item, ok := keyspace.ItemOfOrder(c.orderID)
	if !ok || (c.paymentID != "" && !validPaymentID(c.paymentID)) || (c.paymentIntent != "" && !validPaymentID(c.paymentIntent)) {
		return Order{}, "", ErrNotFound
	}
	k := s.keys.Item(item)
	restock := "0"
	if c.restock {
		restock = "1"
	}
	res, err := refundOrderScript.Run(ctx, s.rdb,
		[]string{k.Hash(), k.Orders(), k.Held(), k.PaidBy(), k.Outbox(), k.Changed(), k.Clock(), k.Payments(), k.Refunds()},
		item, c.orderID, c.paymentID, c.mode, strconv.FormatInt(c.cents, 10), restock, c.key, c.paymentIntent).Slice()
	if err != nil {
		return Order{}, "", fmt.Errorf("orders: %s refund of %s: %w", c.mode, c.orderID, err)
	}
	if len(res) < 2 {
		return Order{}, "", fmt.Errorf("orders: %s refund of %s: %w", c.mode, c.orderID, errReply)
	}
	outcome, _ := res[0].(string)
	o, err := s.replyOrder(c.orderID, item, outcome, res[1])
	if err != nil {
		return Order{}, "", fmt.Errorf("orders: %s refund of %s: %w", c.mode, c.orderID, err)
	}
	if outcome == "invalid_state" {
		return o, outcome, fmt.Errorf("orders: %s refund of %s (%s): %w", c.mode, c.orderID, o.Status, ErrInvalidState)
	}
	if outcome == refundApplied {
		if len(res) >= 4 {
			s.soldChanged(ctx, item, res[2:])
		}
		if c.restock && s.Hooks.StockReturned != nil {
			s.stockReturned(item)
		}
	}
	return o, outcome, nil
}

// RequestRefund records an admin's full refund of a paid order under key, and whether its units
// go back on sale, before the provider is asked; a later key keeps the first's restock. It
// returns the order and the session to refund; done: key's refund was made (answer it again).
// Errors: ErrNotFound, ErrInvalidState (not paid with a payment, or refunded under another key).
func (s *Store) RequestRefund(ctx context.Context, orderID, key string, restock bool) (o Order, paymentID string, done bool, err error) {
	o, outcome, err := s.refundOrder(ctx, refundCall{mode: "request", orderID: orderID, key: key, restock: restock})
	if err != nil {
		return o, "", false, err
	}
	pays, err := s.PaymentsOf(ctx, o.ItemID, []string{orderID})
	if err != nil {
		return o, "", false, err
	}
	return o, pays[orderID].ID, outcome == refundDuplicate, nil
}

// WithdrawRefund forgets the admin's refund request of key (the provider refused it), so a
// refund made later at the provider does not take its restock.
func (s *Store) WithdrawRefund(ctx context.Context, orderID, key string) error {
	_, _, err := s.refundOrder(ctx, refundCall{mode: "withdraw", orderID: orderID, key: key})
	return err
}

// RecordRefund applies the provider's refund of the order's session paymentID: refundedCents in
// all so far, full when nothing is left. A full one makes a paid order refunded once (restocked
// as requested), a partial one publishes payment.refunded. It reports whether anything changed:
// never for a payment the shop refunded itself. ErrNotFound: no such order, or not its payment.
func (s *Store) RecordRefund(ctx context.Context, orderID, paymentID, paymentIntent string, refundedCents int64, full bool) (Order, bool, error) {
	mode := "partial"
	if full {
		mode = "full"
	}
	o, outcome, err := s.refundOrder(ctx, refundCall{mode: mode, orderID: orderID, paymentID: paymentID,
		paymentIntent: paymentIntent, cents: refundedCents})
	return o, outcome == refundApplied || outcome == refundRecorded, err
}

// RecordDispute marks a paid order's payment disputed (payment_status disputed,
// payment.disputed), once. It reports whether this call recorded it.
func (s *Store) RecordDispute(ctx context.Context, orderID, paymentID, paymentIntent string) (Order, bool, error) {
	o, outcome, err := s.refundOrder(ctx, refundCall{mode: "dispute", orderID: orderID, paymentID: paymentID,
		paymentIntent: paymentIntent})
	return o, outcome == refundRecorded, err
}

// soldChanged tells the PaidChanged hook the best-sellers figure a script replied: reply[len-2]
// is the item's units, reply[len-1] the figure's number (a reply without them says nothing).
func (s *Store) soldChanged(ctx context.Context, item string, reply []any) {
	if s.Hooks.PaidChanged == nil || len(reply) < 2 {
		return
	}
	sold, ok1 := reply[len(reply)-2].(int64)
	seq, ok2 := reply[len(reply)-1].(int64)
	if ok1 && ok2 && seq > 0 {
		s.Hooks.PaidChanged(ctx, item, sold, seq)
	}
}
