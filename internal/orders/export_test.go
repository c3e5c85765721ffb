package orders

import (
	"context"
	"time"
)

// SetHostClock makes the store read this host's clock from host (a clock that runs behind
// Redis's, say) and measure its offset from Redis again on its next use.
func (s *Store) SetHostClock(host func() time.Time) {
	s.clock.host = host
	s.clock.check.Store(0)
}

// SetUnlistGrace sets how long an index field that names no order stays marked before it goes.
func (s *Store) SetUnlistGrace(d time.Duration) { s.index.grace = d }

// ExpireEntries runs one expire script call on the given expiry entries of item.
func (s *Store) ExpireEntries(ctx context.Context, item string, entries ...string) (ExpireResult, error) {
	args := make([]any, len(entries))
	for i, e := range entries {
		args[i] = e
	}
	return s.expireOrders(ctx, item, args)
}

// RunChange runs the change script name ("pay", "expire" or "refund_order") on item's keys with
// args as its ARGV, as the store's own calls pass them.
func (s *Store) RunChange(ctx context.Context, name, item string, args ...any) error {
	k := s.keys.Item(item)
	switch name {
	case "pay":
		return payScript.Run(ctx, s.rdb, []string{k.Hash(), k.Orders(), k.Held(), k.PaidBy(), k.Expiry(),
			k.Outbox(), k.Changed(), k.Clock(), k.Payments()}, args...).Err()
	case "expire":
		return expireScript.Run(ctx, s.rdb, []string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox(),
			k.Changed(), k.Clock(), k.Payments()}, args...).Err()
	case "refund_order":
		return refundOrderScript.Run(ctx, s.rdb, []string{k.Hash(), k.Orders(), k.Held(), k.PaidBy(), k.Outbox(),
			k.Changed(), k.Clock(), k.Payments(), k.Refunds()}, args...).Err()
	}
	panic("RunChange: unknown script " + name)
}
