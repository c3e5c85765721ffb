package orders

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/lua"
)

// The lifecycle scripts; release.lua is their shared "give stock and allowance back".
var (
	payScript    = lua.New("pay", "release.lua", "pay.lua")
	cancelScript = lua.New("cancel", "release.lua", "cancel.lua")
	expireScript = lua.New("expire", "release.lua", "expire.lua")
)

// MaxExpireBatch bounds one expire script call, so it holds Redis for milliseconds at most.
const MaxExpireBatch = 1000

// Pay moves the caller's reserved order to paid. A malformed id or another user's order is
// ErrNotFound; a reservation whose time ran out is ErrExpired (the call expires it if the
// expirer has not yet, returning its stock); a paid or cancelled order is ErrInvalidState.
// The returned order is the order after the call, also alongside ErrExpired/ErrInvalidState.
// While a restore rebuilds the item (its hash missing) the call fails and changes nothing.
func (s *Store) Pay(ctx context.Context, user, id string) (Order, error) {
	item, ok := keyspace.ItemOfOrder(id)
	if !ok || !keyspace.ValidID(user) {
		return Order{}, ErrNotFound
	}
	k := s.keys.Item(item)
	res, err := payScript.Run(ctx, s.rdb,
		[]string{k.Hash(), k.Orders(), k.Held(), k.PaidBy(), k.Expiry(), k.Outbox()},
		item, id, user).Slice()
	if err != nil {
		return Order{}, fmt.Errorf("orders: pay %s: %w", id, err)
	}
	if len(res) != 3 {
		return Order{}, fmt.Errorf("orders: pay %s: %w", id, errReply)
	}
	outcome, _ := res[0].(string)
	o, err := s.replyOrder(id, item, outcome, res[1])
	if err != nil {
		return Order{}, fmt.Errorf("orders: pay %s: %w", id, err)
	}
	switch outcome {
	case "paid":
		if s.Hooks.PaidChanged != nil {
			paid, _ := res[2].(int64)
			s.Hooks.PaidChanged(ctx, item, paid)
		}
		return o, nil
	case "order_expired":
		s.stockReturned(item)
		return o, fmt.Errorf("orders: pay %s: %w", id, ErrExpired)
	case "invalid_state":
		return o, fmt.Errorf("orders: pay %s (%s): %w", id, o.Status, ErrInvalidState)
	}
	return Order{}, fmt.Errorf("orders: pay %s: unknown outcome %q: %w", id, outcome, errReply)
}

// Cancel moves the caller's reserved order to cancelled and gives its stock and allowance
// back. A malformed id or another user's order is ErrNotFound; an order that is not reserved
// is ErrInvalidState, and so is a reservation whose time ran out (the call expires it if the
// expirer has not yet). The returned order is the order after the call.
func (s *Store) Cancel(ctx context.Context, user, id string) (Order, error) {
	item, ok := keyspace.ItemOfOrder(id)
	if !ok || !keyspace.ValidID(user) {
		return Order{}, ErrNotFound
	}
	k := s.keys.Item(item)
	res, err := cancelScript.Run(ctx, s.rdb,
		[]string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox()},
		item, id, user).Slice()
	if err != nil {
		return Order{}, fmt.Errorf("orders: cancel %s: %w", id, err)
	}
	if len(res) != 2 {
		return Order{}, fmt.Errorf("orders: cancel %s: %w", id, errReply)
	}
	outcome, _ := res[0].(string)
	o, err := s.replyOrder(id, item, outcome, res[1])
	if err != nil {
		return Order{}, fmt.Errorf("orders: cancel %s: %w", id, err)
	}
	switch outcome {
	case "cancelled":
		s.stockReturned(item)
		return o, nil
	case "invalid_state":
		if o.Status == Expired {
			// Possibly expired by this very call: its stock came back.
			s.stockReturned(item)
		}
		return o, fmt.Errorf("orders: cancel %s (%s): %w", id, o.Status, ErrInvalidState)
	}
	return Order{}, fmt.Errorf("orders: cancel %s: unknown outcome %q: %w", id, outcome, errReply)
}

// ExpireResult is what one expire call did.
type ExpireResult struct {
	Examined int64 // due index entries taken off; == batch means more may be due
	Expired  int64 // orders moved reserved -> expired
	Units    int64 // stock units returned
}

// ExpireDue expires up to batch (1..MaxExpireBatch) due reservations of one item in one
// atomic script call. Entries whose order a payment or cancel already settled are dropped.
func (s *Store) ExpireDue(ctx context.Context, item string, batch int) (ExpireResult, error) {
	if !keyspace.ValidID(item) {
		return ExpireResult{}, fmt.Errorf("orders: expire: bad item id %q", item)
	}
	if batch < 1 || batch > MaxExpireBatch {
		return ExpireResult{}, fmt.Errorf("orders: expire %s: batch %d outside 1..%d", item, batch, MaxExpireBatch)
	}
	k := s.keys.Item(item)
	res, err := expireScript.Run(ctx, s.rdb,
		[]string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox()},
		item, batch).Int64Slice()
	if err != nil {
		return ExpireResult{}, fmt.Errorf("orders: expire %s: %w", item, err)
	}
	if len(res) != 3 {
		return ExpireResult{}, fmt.Errorf("orders: expire %s: %w", item, errReply)
	}
	r := ExpireResult{Examined: res[0], Expired: res[1], Units: res[2]}
	if r.Units > 0 {
		s.stockReturned(item)
	}
	return r, nil
}

// dueItems returns the items among ids whose expiry index has an entry due now (by Redis
// TIME): one TIME and one pipelined ZRANGE per thousand items, so a sweep over a large
// catalogue with nothing due costs two round trips instead of a script call per item.
func (s *Store) dueItems(ctx context.Context, ids []string) ([]string, error) {
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("orders: time: %w", err)
	}
	var due []string
	for lo := 0; lo < len(ids); lo += 1000 {
		chunk := ids[lo:min(lo+1000, len(ids))]
		pipe := s.rdb.Pipeline()
		first := make([]*redis.ZSliceCmd, len(chunk))
		for i, item := range chunk {
			first[i] = pipe.ZRangeWithScores(ctx, s.keys.Item(item).Expiry(), 0, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("orders: expiry heads: %w", err)
		}
		for i, item := range chunk {
			if z := first[i].Val(); len(z) == 1 && z[0].Score <= float64(now.UnixMilli()) {
				due = append(due, item)
			}
		}
	}
	return due, nil
}

// replyOrder decodes the packed order of a pay or cancel reply; not_found has none.
func (s *Store) replyOrder(id, item, outcome string, packed any) (Order, error) {
	if outcome == "not_found" {
		return Order{}, ErrNotFound
	}
	p, _ := packed.(string)
	return Unpack(id, item, p)
}

func (s *Store) stockReturned(item string) {
	if s.Hooks.StockReturned != nil {
		s.Hooks.StockReturned(item)
	}
}
