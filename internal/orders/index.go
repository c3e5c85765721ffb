package orders

import (
	"context"
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
type Index struct {
	rdb  redis.UniversalClient
	keys keyspace.Space
}

// NewIndex returns the order index over rdb with the given key space.
func NewIndex(rdb redis.UniversalClient, keys keyspace.Space) *Index {
	return &Index{rdb: rdb, keys: keys}
}

// Add puts orders into their users' indexes: one pipelined ZADD per user (split by node on a
// cluster).
func (x *Index) Add(ctx context.Context, orders []Order) error {
	if len(orders) == 0 {
		return nil
	}
	byUser := map[string][]redis.Z{}
	for _, o := range orders {
		byUser[o.UserID] = append(byUser[o.UserID], redis.Z{Score: float64(o.CreatedAt.UnixMilli()), Member: o.ID})
	}
	return x.add(ctx, byUser)
}

// AddReserved puts the orders of order.reserved events into their users' indexes; other
// events are ignored. The outbox relay calls it before the events leave Redis.
func (x *Index) AddReserved(ctx context.Context, evs []events.Event) error {
	byUser := map[string][]redis.Z{}
	for _, ev := range evs {
		if ev.Type != events.OrderReserved || ev.OrderID == "" || !keyspace.ValidID(ev.UserID) {
			continue
		}
		byUser[ev.UserID] = append(byUser[ev.UserID], redis.Z{Score: float64(ev.At.UnixMilli()), Member: ev.OrderID})
	}
	if len(byUser) == 0 {
		return nil
	}
	return x.add(ctx, byUser)
}

func (x *Index) add(ctx context.Context, byUser map[string][]redis.Z) error {
	pipe := x.rdb.Pipeline()
	for user, zs := range byUser {
		pipe.ZAdd(ctx, x.keys.UserOrderIndex(user), zs...)
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
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("orders: unindex %d users' orders: %w", len(byUser), err)
	}
	return nil
}

// ids returns the order ids of the user's index, grouped by item in the order the index holds
// them (ascending creation), and the items in the order first seen.
func (x *Index) ids(ctx context.Context, user string) (items []string, byItem map[string][]string, err error) {
	all, err := x.rdb.ZRange(ctx, x.keys.UserOrderIndex(user), 0, -1).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("orders: list index: %w", err)
	}
	byItem = map[string][]string{}
	for _, id := range all {
		item, ok := keyspace.ItemOfOrder(id)
		if !ok {
			continue
		}
		if byItem[item] == nil {
			items = append(items, item)
		}
		byItem[item] = append(byItem[item], id)
	}
	return items, byItem, nil
}
