package orders

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/keyspace"
)

// Index keeps the users' order indexes (keyspace.Space.UserOrderIndex): the one key per user
// that names every order of the user, so "my orders" reads one key and then only the records
// it names, whatever the shard count and the catalogue.
//
// The index lives in the user's slot and the orders in their items' slots, so no script can
// write both. The index is a set of ids, never of states: an order enters it once when it is
// made and leaves it when pruning removes the order, while paying, cancelling and expiring
// change only the record the reader fetches. Adding is idempotent (ZADD of the same member and
// score), so the two writers of each entry never duplicate it: the purchase path right after
// its script made the order (the shopper's next read sees it), and the outbox relay from the
// order's order.reserved event before the event leaves Redis (an api that died in between
// loses nothing). A reader skips an entry whose record is gone.
//
// Beside it, the user's orders version (keyspace.Space.UserOrdersVersion) grows with every
// index write and every order event the relay applies, so a reader that knows the version
// learns "unchanged" from one key. It is written after the change it counts: a list read
// after a change may carry the version before it (the next read sees a newer one).
type Index struct {
	rdb  redis.UniversalClient
	keys keyspace.Space
}

// NewIndex returns the order index over rdb with the given key space.
func NewIndex(rdb redis.UniversalClient, keys keyspace.Space) *Index {
	return &Index{rdb: rdb, keys: keys}
}

// Add puts orders into their users' indexes: one pipelined ZADD and INCR of the version per
// user (split by node on a cluster).
func (x *Index) Add(ctx context.Context, orders []Order) error {
	if len(orders) == 0 {
		return nil
	}
	byUser := map[string]*userChange{}
	for _, o := range orders {
		byUser[o.UserID] = byUser[o.UserID].with(redis.Z{Score: float64(o.CreatedAt.UnixMilli()), Member: o.ID})
	}
	return x.apply(ctx, byUser)
}

// Changed applies events of users' orders to their indexes: the orders of order.reserved
// events go in, and the version of the user every order event names (order.*,
// payment.refunded) grows by one per event. Other events are ignored. The outbox relay calls
// it before the events leave Redis.
func (x *Index) Changed(ctx context.Context, evs []events.Event) error {
	byUser := map[string]*userChange{}
	for _, ev := range evs {
		if !Concerns(ev) || !keyspace.ValidID(ev.UserID) {
			continue
		}
		if ev.Type == events.OrderReserved && ev.OrderID != "" {
			byUser[ev.UserID] = byUser[ev.UserID].with(redis.Z{Score: float64(ev.At.UnixMilli()), Member: ev.OrderID})
		} else {
			byUser[ev.UserID] = byUser[ev.UserID].with()
		}
	}
	if len(byUser) == 0 {
		return nil
	}
	return x.apply(ctx, byUser)
}

// Concerns reports whether an event changes what a user's "my orders" shows: an order's
// creation, payment, cancellation, expiry or refund.
func Concerns(ev events.Event) bool {
	switch ev.Type {
	case events.OrderReserved, events.OrderPaid, events.OrderCancelled, events.OrderExpired, events.PaymentRefunded:
		return true
	}
	return false
}

// userChange is what one call writes for one user: index entries, and how much the version
// grows (one per order added or event applied).
type userChange struct {
	entries []redis.Z
	bump    int64
}

func (c *userChange) with(zs ...redis.Z) *userChange {
	if c == nil {
		c = &userChange{}
	}
	c.entries = append(c.entries, zs...)
	c.bump++
	return c
}

// apply writes each user's entries (if any) and grows the user's version: one pipeline.
func (x *Index) apply(ctx context.Context, byUser map[string]*userChange) error {
	pipe := x.rdb.Pipeline()
	for user, c := range byUser {
		if len(c.entries) > 0 {
			pipe.ZAdd(ctx, x.keys.UserOrderIndex(user), c.entries...)
		}
		pipe.IncrBy(ctx, x.keys.UserOrdersVersion(user), c.bump)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("orders: index %d users' orders: %w", len(byUser), err)
	}
	return nil
}

// Remove takes pruned orders (user -> order ids) out of their users' indexes.
func (x *Index) Remove(ctx context.Context, byUser map[string][]string) error {
	if len(byUser) == 0 {
		return nil
	}
	pipe := x.rdb.Pipeline()
	for user, ids := range byUser {
		members := make([]any, len(ids))
		for i, id := range ids {
			members[i] = id
		}
		pipe.ZRem(ctx, x.keys.UserOrderIndex(user), members...)
		pipe.Incr(ctx, x.keys.UserOrdersVersion(user))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("orders: unindex %d users' orders: %w", len(byUser), err)
	}
	return nil
}

// read returns the user's orders version ("0" before any) and the order ids of the user's
// index, grouped by item in the order the index holds them (ascending creation), with the
// items in the order first seen: one round trip, two commands in the user's slot.
func (x *Index) read(ctx context.Context, user string) (version string, items []string, byItem map[string][]string, err error) {
	pipe := x.rdb.Pipeline()
	ver := pipe.Get(ctx, x.keys.UserOrdersVersion(user))
	idx := pipe.ZRange(ctx, x.keys.UserOrderIndex(user), 0, -1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", nil, nil, fmt.Errorf("orders: list index: %w", err)
	}
	version = ver.Val()
	if version == "" {
		version = "0"
	}
	byItem = map[string][]string{}
	for _, id := range idx.Val() {
		item, ok := keyspace.ItemOfOrder(id)
		if !ok {
			continue
		}
		if byItem[item] == nil {
			items = append(items, item)
		}
		byItem[item] = append(byItem[item], id)
	}
	return version, items, byItem, nil
}
