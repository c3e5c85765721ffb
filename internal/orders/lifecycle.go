package orders

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/keyspace"
)

// MaxExpireBatch bounds a pass's batch: the expiry entries it reads and the orders one expire
// script call names (the script refuses more), so a call holds Redis for milliseconds at most.
const MaxExpireBatch = 1000

// Pay moves the caller's reserved order to paid and returns it, also with ErrExpired (a lapsed
// reservation, expired now if need be) or ErrInvalidState (paid or cancelled). A malformed id or
// another user's order is ErrNotFound. While a restore rebuilds the item the call fails and
// changes nothing.
func (s *Store) Pay(ctx context.Context, user, id string) (Order, error) {
	item, ok := keyspace.ItemOfOrder(id)
	if !ok || !keyspace.ValidID(user) {
		return Order{}, ErrNotFound
	}
	k := s.keys.Item(item)
	res, err := payScript.Run(ctx, s.rdb,
		[]string{k.Hash(), k.Orders(), k.Held(), k.PaidBy(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(), k.Payments()},
		item, id, user, "", "", 0).Slice()
	if err != nil {
		return Order{}, fmt.Errorf("orders: pay %s: %w", id, err)
	}
	if len(res) < 3 {
		return Order{}, fmt.Errorf("orders: pay %s: %w", id, errReply)
	}
	outcome, _ := res[0].(string)
	o, err := s.replyOrder(id, item, outcome, res[1])
	if err != nil {
		return Order{}, fmt.Errorf("orders: pay %s: %w", id, err)
	}
	switch outcome {
	case "paid":
		s.soldChanged(ctx, item, res)
		return o, nil
	case "order_expired":
		s.stockReturned(item)
		return o, fmt.Errorf("orders: pay %s: %w", id, ErrExpired)
	case "invalid_state":
		return o, fmt.Errorf("orders: pay %s: %w (it is %s)", id, ErrInvalidState, o.Status)
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
		[]string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(), k.Payments()},
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
		s.released(item, id)
		return o, nil
	case "payment_processing":
		return o, fmt.Errorf("orders: cancel %s: %w", id, ErrPaymentProcessing)
	case "invalid_state":
		if o.Status == Expired {
			// Possibly expired by this very call: its stock came back.
			s.stockReturned(item)
			s.released(item, id)
		}
		return o, fmt.Errorf("orders: cancel %s: %w (it is %s)", id, ErrInvalidState, o.Status)
	}
	return Order{}, fmt.Errorf("orders: cancel %s: unknown outcome %q: %w", id, outcome, errReply)
}

// ExpireResult is what one expire pass did. Entries are expiry index members: one per
// purchase batch (naming up to 256 orders) or per single order (see keyspace.ExpiryEntry).
type ExpireResult struct {
	Read     int64 // due index entries read; == batch means more may be due
	Examined int64 // due index entries taken off (Read less those left: see ExpireShardFrom)
	Expired  int64 // orders moved reserved -> expired
	Units    int64 // stock units returned
	Calls    int64 // expire script calls made (none while nothing is due)
}

// ExpireDue expires the orders of up to batch (1..MaxExpireBatch) due expiry entries of the
// item's shard (the item's own and those of the shard's other items): see ExpireShard.
func (s *Store) ExpireDue(ctx context.Context, item string, batch int) (ExpireResult, error) {
	if !keyspace.ValidID(item) {
		return ExpireResult{}, fmt.Errorf("orders: expire: bad item id %q", item)
	}
	return s.ExpireShard(ctx, keyspace.ShardOf(item), batch)
}

// ExpireShard expires the orders of up to batch (1..MaxExpireBatch) due expiry entries of one
// shard, read by Redis's clock (redisClock), in atomic calls per item that re-check each entry's
// orders against Redis TIME and skip settled ones. A purchase batch's entry is never split (up
// to keyspace.MaxExpiryRange orders a call). With nothing due it costs one command.
func (s *Store) ExpireShard(ctx context.Context, shard, batch int) (ExpireResult, error) {
	return s.ExpireShardFrom(ctx, shard, 0, batch)
}

// ExpireShardFrom is ExpireShard reading the due entries from the offset-th on. Entries read
// but left in the index (Read - Examined: an item being restored, an entry Redis TIME says is
// not due yet, a failed call) stay at the head of the index; a sweep passes the number it has
// seen left as the offset of its next pass, so they cannot hold back the shard's other items.
func (s *Store) ExpireShardFrom(ctx context.Context, shard int, offset int64, batch int) (ExpireResult, error) {
	if batch < 1 || batch > MaxExpireBatch {
		return ExpireResult{}, fmt.Errorf("orders: expire shard %d: batch %d outside 1..%d", shard, batch, MaxExpireBatch)
	}
	if shard < 0 || shard >= keyspace.Shards {
		return ExpireResult{}, fmt.Errorf("orders: expire: no shard %d", shard)
	}
	due, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{
		Key: s.keys.Shard(shard).Expiry(), Start: "-inf", Stop: strconv.FormatInt(s.clock.nowMS(ctx, s.rdb), 10),
		ByScore: true, Offset: offset, Count: int64(batch),
	}).Result()
	if err != nil {
		return ExpireResult{}, fmt.Errorf("orders: expire shard %d: %w", shard, err)
	}
	// Each item's entries go out in calls naming at most batch orders (an entry naming more
	// goes alone).
	type call struct {
		entries []any
		orders  uint64
	}
	byItem := map[string][]call{}
	var order []string
	total := ExpireResult{Read: int64(len(due))}
	for _, e := range due {
		item, lo, hi, ok := keyspace.ExpiryEntry(e)
		if !ok {
			// Not an expiry entry (nothing writes one): drop it so it cannot clog the head.
			s.rdb.ZRem(ctx, s.keys.Shard(shard).Expiry(), e)
			total.Examined++
			continue
		}
		calls := byItem[item]
		if calls == nil {
			order = append(order, item)
		}
		named := hi - lo + 1
		if len(calls) == 0 || calls[len(calls)-1].orders+named > uint64(batch) {
			calls = append(calls, call{})
		}
		c := &calls[len(calls)-1]
		c.entries = append(c.entries, e)
		c.orders += named
		byItem[item] = calls
	}
	var first error
	for _, item := range order {
		for _, c := range byItem[item] {
			r, err := s.expireOrders(ctx, item, c.entries)
			if err != nil {
				if first == nil {
					first = err
				}
				continue
			}
			total.Calls++
			total.Examined += r.Examined
			total.Expired += r.Expired
			total.Units += r.Units
		}
	}
	return total, first
}

// expireOrders runs the expire script on some due expiry entries of one item.
func (s *Store) expireOrders(ctx context.Context, item string, entries []any) (ExpireResult, error) {
	k := s.keys.Item(item)
	res, err := expireScript.Run(ctx, s.rdb,
		[]string{k.Hash(), k.Orders(), k.Held(), k.Expiry(), k.Outbox(), k.Changed(), k.Clock(), k.Payments()},
		append([]any{item, s.PaymentHold.Milliseconds()}, entries...)...).Slice()
	if err != nil {
		return ExpireResult{}, fmt.Errorf("orders: expire %s: %w", item, err)
	}
	if len(res) < 3 {
		return ExpireResult{}, fmt.Errorf("orders: expire %s: %w", item, errReply)
	}
	var r ExpireResult
	r.Examined, _ = res[0].(int64)
	r.Expired, _ = res[1].(int64)
	r.Units, _ = res[2].(int64)
	expired := make([]string, 0, len(res)-3)
	for _, v := range res[3:] {
		if id, ok := v.(string); ok {
			expired = append(expired, id)
		}
	}
	if int64(len(expired)) != r.Expired {
		return ExpireResult{}, fmt.Errorf("orders: expire %s: %w", item, errReply)
	}
	if r.Units > 0 {
		s.stockReturned(item)
	}
	if len(expired) > 0 && s.Hooks.Released != nil {
		s.Hooks.Released(item, expired)
	}
	return r, nil
}

// replyOrder decodes the packed order of a pay or cancel reply; not_found has none.
func (s *Store) replyOrder(id, item, outcome string, packed any) (Order, error) {
	if outcome == "not_found" {
		return Order{}, ErrNotFound
	}
	p, _ := packed.(string)
	return Unpack(id, item, p)
}

func (s *Store) released(item, id string) {
	if s.Hooks.Released != nil {
		s.Hooks.Released(item, []string{id})
	}
}

func (s *Store) stockReturned(item string) {
	if s.Hooks.StockReturned != nil {
		s.Hooks.StockReturned(item)
	}
}
