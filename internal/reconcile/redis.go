package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/orders"
)

// redisOrder is the part of a packed order the record keeps.
type redisOrder struct {
	user           string
	qty, price     int64
	status         string
	created, expir int64
}

// parseOrder decodes a packed order with orders.Unpack, keeping the record's fields.
func parseOrder(packed string) (redisOrder, bool) {
	o, err := orders.Unpack("", "", packed)
	if err != nil {
		return redisOrder{}, false
	}
	return redisOrder{user: o.UserID, qty: o.Quantity, price: o.PriceCents, status: string(o.Status),
		created: o.CreatedAt.UnixMilli(), expir: o.ExpiresAt.UnixMilli()}, true
}

// redisCounters are an item's stock figures in its hash.
type redisCounters struct {
	exists                      bool
	total, left, reserved, paid int64
	attrs                       itemAttrs
}

// redisSnap is an atomic read of one item: counters, some orders and the outbox position
// (the id of the newest event ever appended, so every change visible here has an event at
// or before it).
type redisSnap struct {
	counters redisCounters
	orders   map[string]*redisOrder // nil value: no such order
	pos      events.Position
	backlog  int64
}

var zeroPos events.Position

// parsePos reads a stream id Redis generated (the zero position if it were malformed).
func parsePos(id string) events.Position {
	p, _ := events.ParseEntryID(id)
	return p
}

func fmtPos(p events.Position) string { return fmt.Sprintf("%d-%d", p.Ms, p.Seq) }

func isNoSuchKey(err error) bool { return err != nil && strings.Contains(err.Error(), "no such key") }

// snapshot reads counters, the given orders and the outbox position of one item in one
// MULTI (all the item's keys share its slot).
func (r *Reconciler) snapshot(ctx context.Context, item string, ids []string) (redisSnap, error) {
	k := r.keys.Item(item)
	var hm *redis.SliceCmd
	var om *redis.SliceCmd
	var info *redis.XInfoStreamCmd
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		hm = p.HMGet(ctx, k.Hash(), "stock_total", "stock_left", "reserved", "paid",
			"name", "category", "price_cents", "per_user_limit", "starts_at", "ends_at")
		if len(ids) > 0 {
			om = p.HMGet(ctx, k.Orders(), ids...)
		}
		info = p.XInfoStream(ctx, k.Outbox())
		return nil
	})
	if err != nil && !isNoSuchKey(err) {
		return redisSnap{}, fmt.Errorf("reconcile: redis snapshot of %s: %w", item, err)
	}
	var s redisSnap
	vals := hm.Val()
	if len(vals) == 10 && vals[0] != nil {
		s.counters.exists = true
		n := func(v any) int64 { x, _ := strconv.ParseInt(fmt.Sprint(v), 10, 64); return x }
		str := func(v any) string { x, _ := v.(string); return x }
		s.counters.total, s.counters.left, s.counters.reserved, s.counters.paid = n(vals[0]), n(vals[1]), n(vals[2]), n(vals[3])
		s.counters.attrs = itemAttrs{Name: str(vals[4]), Category: str(vals[5]), Price: n(vals[6]),
			PerUser: n(vals[7]), StartsAtMs: n(vals[8]), EndsAtMs: n(vals[9])}
	}
	if om != nil {
		s.orders = make(map[string]*redisOrder, len(ids))
		for i, v := range om.Val() {
			var o *redisOrder
			if str, ok := v.(string); ok {
				if p, ok := parseOrder(str); ok {
					o = &p
				}
			}
			s.orders[ids[i]] = o
		}
	}
	if info.Err() == nil {
		s.pos = parsePos(info.Val().LastGeneratedID)
		s.backlog = info.Val().Length
	}
	return s, nil
}

// ratingSnap is an atomic read of some of an item's ratings (user -> stars, "" = none) and the
// ranking outbox position: every rating is set by rate.lua together with its rating.set entry
// (restore's replay, which writes none, holds the lock a batch needs), so every rating visible
// here has an event at or before pos.
type ratingSnap struct {
	stars map[string]string
	pos   events.Position
}

// ratingSnapshot reads the given users' ratings of an item and the ranking outbox position in
// one MULTI (all in the ranking slot).
func (r *Reconciler) ratingSnapshot(ctx context.Context, item string, users []string) (ratingSnap, error) {
	var hm *redis.SliceCmd
	var info *redis.XInfoStreamCmd
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		hm = p.HMGet(ctx, r.keys.ItemRatings(item), users...)
		info = p.XInfoStream(ctx, r.keys.RankOutbox())
		return nil
	})
	if err != nil && !isNoSuchKey(err) {
		return ratingSnap{}, fmt.Errorf("reconcile: redis ratings of %s: %w", item, err)
	}
	s := ratingSnap{stars: make(map[string]string, len(users))}
	for i, v := range hm.Val() {
		str, _ := v.(string)
		s.stars[users[i]] = str
	}
	if info.Err() == nil {
		s.pos = parsePos(info.Val().LastGeneratedID)
	}
	return s, nil
}

// scanRatings reads every rating of the item (HSCAN), user -> stars.
func (r *Reconciler) scanRatings(ctx context.Context, item string) (map[string]string, error) {
	out := map[string]string{}
	key := r.keys.ItemRatings(item)
	var cursor uint64
	for {
		kv, next, err := r.rdb.HScan(ctx, key, cursor, "", 5000).Result()
		if err != nil {
			return nil, fmt.Errorf("reconcile: ratings of %s: %w", item, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

// streamPosition returns an outbox stream's position now (the id of its newest event ever).
func (r *Reconciler) streamPosition(ctx context.Context, stream string) (events.Position, error) {
	info, err := r.rdb.XInfoStream(ctx, stream).Result()
	if isNoSuchKey(err) {
		return zeroPos, nil
	}
	if err != nil {
		return zeroPos, fmt.Errorf("reconcile: outbox %s: %w", stream, err)
	}
	return parsePos(info.LastGeneratedID), nil
}

// position returns the item's outbox position now.
func (r *Reconciler) position(ctx context.Context, item string) (events.Position, error) {
	return r.streamPosition(ctx, r.keys.Item(item).Outbox())
}

// scanOrders reads every order of the item (HSCAN, so a big item never blocks Redis).
func (r *Reconciler) scanOrders(ctx context.Context, item string) (map[string]redisOrder, error) {
	out := map[string]redisOrder{}
	key := r.keys.Item(item).Orders()
	var cursor uint64
	for {
		kv, next, err := r.rdb.HScan(ctx, key, cursor, "", 5000).Result()
		if err != nil {
			return nil, fmt.Errorf("reconcile: orders of %s: %w", item, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if o, ok := parseOrder(kv[i+1]); ok {
				out[kv[i]] = o
			} else {
				out[kv[i]] = redisOrder{status: "malformed"}
			}
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

// catalog returns the item ids Redis knows.
func (r *Reconciler) catalog(ctx context.Context) ([]string, error) {
	ids, err := r.rdb.SMembers(ctx, r.keys.Catalog()).Result()
	if err != nil {
		return nil, fmt.Errorf("reconcile: catalogue: %w", err)
	}
	return ids, nil
}

// errUnsettled means events were still in flight when the settle time ran out.
var errUnsettled = errors.New("events still in flight")

// settle waits until every event up to each outbox stream's position (by stream key) is in
// Postgres: first published (the relay removes an entry only once Kafka has it: outbox/ack.lua),
// then committed by the consumer group past the topic's end as it was then (it commits only
// after its transaction).
func (r *Reconciler) settle(ctx context.Context, pos map[string]events.Position, deadline time.Time) error {
	pending := make([]string, 0, len(pos))
	for stream, p := range pos {
		if p != zeroPos {
			pending = append(pending, stream)
		}
	}
	for len(pending) > 0 {
		pipe := r.rdb.Pipeline()
		cmds := make([]*redis.XMessageSliceCmd, len(pending))
		for i, stream := range pending {
			cmds[i] = pipe.XRangeN(ctx, stream, "-", fmtPos(pos[stream]), 1)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("reconcile: outbox: %w", err)
		}
		still := pending[:0]
		for i, stream := range pending {
			if len(cmds[i].Val()) > 0 {
				still = append(still, stream)
			}
		}
		pending = still
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d outbox streams not published", errUnsettled, len(pending))
		}
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	if r.opt.Pipeline == nil {
		return nil
	}
	mark, err := r.opt.Pipeline.Mark(ctx)
	if err != nil {
		return err
	}
	for {
		ok, err := r.opt.Pipeline.Reached(ctx, mark)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: consumer not caught up", errUnsettled)
		}
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
