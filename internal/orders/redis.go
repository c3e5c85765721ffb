package orders

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/keyspace"
)

// Store reads and changes orders in Redis.
type Store struct {
	rdb   redis.UniversalClient
	keys  keyspace.Space
	index *Index
	Hooks Hooks
	// PaymentHold is how long a reservation whose payment is processing stays reserved past
	// its expires_at (FLASHSALE_PAYMENT_PROCESSING_HOLD; 0 with no provider).
	PaymentHold time.Duration
	clock       redisClock
}

// NewStore returns a Store over rdb with the given key space.
func NewStore(rdb redis.UniversalClient, keys keyspace.Space) *Store {
	return &Store{rdb: rdb, keys: keys, index: NewIndex(rdb, keys), clock: redisClock{host: time.Now}}
}

// redisClock reads Redis's clock from this host's without a round trip: the offset between
// them is measured with one TIME call at most every clockCheck. Reservations fall due by Redis
// TIME (the scripts' only clock); the expirer's read of the due entries must use the same
// clock, or a host whose clock runs behind Redis's would expire every reservation late by the
// difference.
type redisClock struct {
	host  func() time.Time // this host's clock (tests set one that runs behind)
	skew  atomic.Int64     // Redis's clock minus the host's, ms, as last measured
	check atomic.Int64     // host time (unix ms) when the offset is measured again
}

const clockCheck = 10 * time.Second

// nowMS is Redis's clock in unix ms, as well as the last measure of the offset knows it. When
// a measure fails the last offset stays (zero at first: the host's clock) and the next call
// tries again.
func (c *redisClock) nowMS(ctx context.Context, rdb redis.UniversalClient) int64 {
	h := c.host().UnixMilli()
	if h >= c.check.Load() {
		t, err := rdb.Time(ctx).Result()
		after := c.host().UnixMilli()
		if err == nil {
			// Redis answered somewhere between h and after: take the midpoint.
			c.skew.Store(t.UnixMilli() - (h+after)/2)
			c.check.Store(after + clockCheck.Milliseconds())
		}
		h = after
	}
	return h + c.skew.Load()
}

// Get returns the user's order; another user's order is ErrNotFound, as is a malformed id.
func (s *Store) Get(ctx context.Context, user, id string) (Order, error) {
	item, ok := keyspace.ItemOfOrder(id)
	if !ok {
		return Order{}, ErrNotFound
	}
	k := s.keys.Item(item)
	pipe := s.rdb.Pipeline()
	rec := pipe.HGet(ctx, k.Orders(), id)
	pay := pipe.HGet(ctx, k.Payments(), id)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Order{}, fmt.Errorf("orders: get %s: %w", id, err)
	}
	packed, err := rec.Result()
	if errors.Is(err, redis.Nil) {
		return Order{}, ErrNotFound
	}
	if err != nil {
		return Order{}, fmt.Errorf("orders: get %s: %w", id, err)
	}
	o, err := Unpack(id, item, packed)
	if err != nil {
		return Order{}, err
	}
	if o.UserID != user {
		return Order{}, ErrNotFound
	}
	o.PaymentID, o.PaymentStatus = paymentOf(pay.Val())
	return o, nil
}

// List returns the user's orders, newest first (ListSince without a known version).
func (s *Store) List(ctx context.Context, user string) ([]Order, error) {
	l, err := s.ListSince(ctx, user, "")
	return l.Orders, err
}

// Listing is the user's orders and the version they were read at.
type Listing struct {
	Orders []Order
	// Version grows with every change of the user's orders ("0" before any): read before
	// the records, so a listing may show changes newer than its version, never older.
	Version string
	// Unchanged: Version is the known one; Orders was not read.
	Unchanged bool
}

// ListSince returns the user's orders, newest first, unless their version is known (then
// Unchanged, after the first round trip): one pipelined GET of the version and ZRANGE of the
// user's order index, then one pipelined HMGET of the records and one of the payments per
// item it names. Two round trips and at most 2 + 2 x orders commands, whatever the shard count
// and the catalogue; on a cluster the second pipeline is split by node. An index entry whose
// record is gone (pruned or lost with Redis) is skipped.
func (s *Store) ListSince(ctx context.Context, user, known string) (Listing, error) {
	version, items, byItem, err := s.index.read(ctx, user)
	if err != nil {
		return Listing{}, err
	}
	if known != "" && known == version {
		return Listing{Version: version, Unchanged: true}, nil
	}
	out := []Order{}
	if len(items) == 0 {
		return Listing{Orders: out, Version: version}, nil
	}
	pipe := s.rdb.Pipeline()
	recs := make([]*redis.SliceCmd, len(items))
	pays := make([]*redis.SliceCmd, len(items))
	for i, item := range items {
		recs[i] = pipe.HMGet(ctx, s.keys.Item(item).Orders(), byItem[item]...)
		pays[i] = pipe.HMGet(ctx, s.keys.Item(item).Payments(), byItem[item]...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Listing{}, fmt.Errorf("orders: list records: %w", err)
	}
	for i, item := range items {
		ids := byItem[item]
		for j, v := range recs[i].Val() {
			packed, ok := v.(string)
			if !ok {
				continue // pruned, or lost with Redis: the record is gone
			}
			o, err := Unpack(ids[j], item, packed)
			if err != nil {
				return Listing{}, err
			}
			if o.UserID == user {
				if p, ok := pays[i].Val()[j].(string); ok {
					o.PaymentID, o.PaymentStatus = paymentOf(p)
				}
				out = append(out, o)
			}
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return newerFirst(out[a], out[b]) })
	return Listing{Orders: out, Version: version}, nil
}

// newerFirst orders by creation time, newest first; within one millisecond, an item's later
// order (higher sequence number: "x.10" after "x.9") comes first, then by id.
func newerFirst(a, b Order) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.After(b.CreatedAt)
	}
	if a.ItemID == b.ItemID {
		sa, _ := strconv.ParseUint(a.ID[len(a.ItemID)+1:], 10, 64)
		sb, _ := strconv.ParseUint(b.ID[len(b.ItemID)+1:], 10, 64)
		if sa != sb {
			return sa > sb
		}
	}
	return a.ID > b.ID
}

// Hooks let other capabilities react to lifecycle changes on this instance (all optional).
type Hooks struct {
	// StockReturned is called after a cancel or expiry gave stock back to an item.
	StockReturned func(item string)
	// PaidChanged is called after a payment or a refund with the item's units for the
	// best-sellers board (paid, less refunded orders' units) and that figure's number, which
	// grows with every change: a report with a smaller number than one applied is stale.
	PaidChanged func(ctx context.Context, item string, sold, seq int64)
	// Released is called with order ids of one item after a cancel or an expiry moved them out
	// of reserved (the expirer passes the ids its call expired), so their open payments can be
	// cancelled at the provider. It must not block.
	Released func(item string, ids []string)
}
