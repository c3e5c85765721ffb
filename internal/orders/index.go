package orders

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/keyspace"
)

// Index keeps the users' order indexes (keyspace.Space.UserOrderIndex): per user, item id -> a
// counter grown by every change of the user's orders of that item; the hash is the "my orders"
// ETag. No script writes it beside the orders, so Mark and Changed both grow it with HINCRBY and
// neither undoes the other (docs/design.md, "GET /api/orders").
type Index struct {
	rdb   redis.UniversalClient
	keys  keyspace.Space
	grace time.Duration // unlistGrace (tests shorten it)
}

// NewIndex returns the order index over rdb with the given key space.
func NewIndex(rdb redis.UniversalClient, keys keyspace.Space) *Index {
	return &Index{rdb: rdb, keys: keys, grace: unlistGrace}
}

// Mark adds to pipe the purchase path's blind write, sent with the purchase script so the
// shopper's next read lists the order: one HINCRBY of item's field per user. A refused attempt
// leaves a field with no order; readers mark it ('?'..item, outside the ETag) and remove it
// once unwritten past unlistGrace (unlist.lua).
func (x *Index) Mark(ctx context.Context, pipe redis.Pipeliner, item string, users []string) {
	for i, u := range users {
		if slices.Contains(users[:i], u) {
			continue
		}
		pipe.HIncrBy(ctx, x.keys.UserOrderIndex(u), item, 1)
	}
}

// Add grows the users' fields of the items of orders (a restore wrote them back); the item
// is the order id's.
func (x *Index) Add(ctx context.Context, orders []Order) error {
	changes := map[userItem]int64{}
	for _, o := range orders {
		if item, ok := keyspace.ItemOfOrder(o.ID); ok && keyspace.ValidID(o.UserID) {
			changes[userItem{o.UserID, item}]++
		}
	}
	return x.apply(ctx, changes)
}

// Changed applies events of users' orders to their indexes: every event Concerns grows its
// user's field of its item by one; others are ignored. The outbox relay calls it before the
// events leave Redis, so an api that died before its blind write loses nothing, and a relayed
// change moves the ETag even after a blind write that landed before its order (a cluster).
func (x *Index) Changed(ctx context.Context, evs []events.Event) error {
	changes := map[userItem]int64{}
	for _, ev := range evs {
		if !Concerns(ev) || !keyspace.ValidID(ev.UserID) || !keyspace.ValidID(ev.ItemID) {
			continue
		}
		changes[userItem{ev.UserID, ev.ItemID}]++
	}
	return x.apply(ctx, changes)
}

// Concerns reports whether an event changes what a user's "my orders" shows: an order's
// creation, payment, cancellation, expiry or refund.
func Concerns(ev events.Event) bool {
	switch ev.Type {
	case events.OrderReserved, events.OrderPaid, events.OrderCancelled, events.OrderExpired,
		events.OrderRefunded, events.PaymentRefunded:
		return true
	}
	return false
}

// Remove grows the fields of pruned orders (user -> order ids): their lists changed. A field
// whose item has no order of the user left is removed by the next reader (unlist.lua).
func (x *Index) Remove(ctx context.Context, byUser map[string][]string) error {
	changes := map[userItem]int64{}
	for user, ids := range byUser {
		for _, id := range ids {
			if item, ok := keyspace.ItemOfOrder(id); ok {
				changes[userItem{user, item}]++
			}
		}
	}
	return x.apply(ctx, changes)
}

type userItem struct{ user, item string }

// apply grows each user's field of each item by its count: one pipeline (split by node on a
// cluster).
func (x *Index) apply(ctx context.Context, changes map[userItem]int64) error {
	if len(changes) == 0 {
		return nil
	}
	pipe := x.rdb.Pipeline()
	for c, n := range changes {
		pipe.HIncrBy(ctx, x.keys.UserOrderIndex(c.user), c.item, n)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("orders: index %d users' items: %w", len(changes), err)
	}
	return nil
}

// unlistGrace is how long a field that names no order stays marked before it goes: well past
// the longest a purchase script may run after its blind write (its call deadline and the
// clock skew allowed, exactlyonce), and a reader's own time between its read and the removal.
const unlistGrace = 2 * (exactlyonce.CallDeadline + exactlyonce.ClockSkew)

// read returns the user's index, items (item -> counter) and marks (item -> mark) apart,
// and its tag: a hash of the items and their counters, "0" for none. One command in the
// user's slot.
func (x *Index) read(ctx context.Context, user string) (tag string, fields, marks map[string]string, err error) {
	all, err := x.rdb.HGetAll(ctx, x.keys.UserOrderIndex(user)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", nil, nil, fmt.Errorf("orders: list index: %w", err)
	}
	fields = make(map[string]string, len(all))
	items := make([]string, 0, len(all))
	for f, v := range all {
		if item, ok := strings.CutPrefix(f, "?"); ok {
			if marks == nil {
				marks = map[string]string{}
			}
			marks[item] = v
			continue
		}
		fields[f] = v
		items = append(items, f)
	}
	if len(items) == 0 {
		return "0", fields, marks, nil
	}
	slices.Sort(items)
	h := fnv.New64a()
	for _, it := range items {
		_, _ = h.Write([]byte(it))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(fields[it]))
		_, _ = h.Write([]byte{0})
	}
	// Never "0": that is the empty index's.
	return strconv.FormatUint(h.Sum64()|1<<63, 10), fields, marks, nil
}

// unlist marks or removes, in the background, the user's fields of items the reader found no
// order of (stale: item -> the counter it saw), and drops the marks of items that have orders
// again or no field (item -> ""), with unlist.lua: the reply does not wait for it, and a
// failure leaves the work to the next reader.
func (x *Index) unlist(user string, stale map[string]string) {
	args := make([]any, 0, 1+2*len(stale))
	args = append(args, max(x.grace.Milliseconds(), 1))
	for it, v := range stale {
		args = append(args, it, v)
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := unlistScript.Run(ctx, x.rdb, []string{x.keys.UserOrderIndex(user)}, args...).Err(); err != nil {
			slog.Warn("my orders: stale index fields not removed", "user", user, "items", len(stale), "err", err)
		}
	}()
}
