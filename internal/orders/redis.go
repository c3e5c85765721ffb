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

// redisClock reads Redis's clock from this host's without a round trip, by an offset measured
// with one TIME call at most every clockCheck. Reservations fall due by Redis TIME, so the
// expirer reads due entries by it too, or a host clock behind Redis's would expire them late.
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

// Listing is the user's orders and the tag they were read at.
type Listing struct {
	Orders []Order
	// Version is the tag of the user's order index ("0" before any order): it changes with
	// every change of the user's orders, and is read before the records, so a listing may
	// show changes newer than its tag, never older.
	Version string
	// Unchanged: Version is the known one; Orders was not read.
	Unchanged bool
}

// ListSince returns the user's orders, newest first, or Unchanged after one command when known
// is their tag: one HGETALL of the user's order index, then one list.lua call per item it names,
// in one pipeline. An item holding no order of the user (a refused purchase's blind write,
// pruned orders) is skipped and marked for removal (Index.unlist).
func (s *Store) ListSince(ctx context.Context, user, known string) (Listing, error) {
	version, fields, marks, err := s.index.read(ctx, user)
	if err != nil {
		return Listing{}, err
	}
	if known != "" && known == version {
		return Listing{Version: version, Unchanged: true}, nil
	}
	out := []Order{}
	items := make([]string, 0, len(fields))
	for it := range fields {
		if keyspace.ValidID(it) {
			items = append(items, it)
		}
	}
	stale := map[string]string{}
	for it := range marks {
		if _, ok := fields[it]; !ok {
			stale[it] = "" // its field went: the mark goes too
		}
	}
	if len(items) == 0 {
		if len(stale) > 0 {
			s.index.unlist(user, stale)
		}
		return Listing{Orders: out, Version: version}, nil
	}
	lists, err := s.listItems(ctx, user, items)
	if err != nil {
		return Listing{}, err
	}
	for i, item := range items {
		vals := lists[i]
		if len(vals) == 0 {
			stale[item] = fields[item]
			continue
		}
		if _, ok := marks[item]; ok {
			stale[item] = "" // it has orders: the mark goes
		}
		if len(vals)%3 != 0 {
			return Listing{}, fmt.Errorf("orders: list %s: malformed reply of %d values", item, len(vals))
		}
		for j := 0; j < len(vals); j += 3 {
			id, _ := vals[j].(string)
			packed, _ := vals[j+1].(string)
			o, err := Unpack(id, item, packed)
			if err != nil {
				return Listing{}, err
			}
			if o.UserID != user {
				continue
			}
			if p, _ := vals[j+2].(string); p != "" {
				o.PaymentID, o.PaymentStatus = paymentOf(p)
			}
			out = append(out, o)
		}
	}
	if len(stale) > 0 {
		s.index.unlist(user, stale)
	}
	sort.SliceStable(out, func(a, b int) bool { return newerFirst(out[a], out[b]) })
	return Listing{Orders: out, Version: version}, nil
}

// listItems calls list.lua for each item in one pipeline and returns the replies in the
// order of items. The script is preloaded (exactlyonce.Load); after a NOSCRIPT (a restart
// or a failover emptied the cache) the items it refused are asked again with its body.
func (s *Store) listItems(ctx context.Context, user string, items []string) ([][]any, error) {
	cmds := make([]*redis.Cmd, len(items))
	send := func(idx []int, withBody bool) {
		pipe := s.rdb.Pipeline()
		for _, i := range idx {
			k := s.keys.Item(items[i])
			keys := []string{k.UserOrders(), k.Orders(), k.Payments()}
			if withBody {
				cmds[i] = listScript.Eval(ctx, pipe, keys, user, items[i])
			} else {
				cmds[i] = listScript.EvalSha(ctx, pipe, keys, user, items[i])
			}
		}
		_, _ = pipe.Exec(ctx) // each command holds its own reply or error
	}
	all := make([]int, len(items))
	for i := range all {
		all[i] = i
	}
	send(all, false)
	var again []int
	for i, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		send(again, true)
	}
	out := make([][]any, len(items))
	for i, c := range cmds {
		v, err := c.Slice()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("orders: list records of %s: %w", items[i], err)
		}
		out[i] = v
	}
	return out, nil
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
