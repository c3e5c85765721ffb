package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/keyspace"
)

// BatchOptions choose what a batch does besides comparing.
type BatchOptions struct {
	// Repair re-emits the events of orders and items Postgres is missing or behind on.
	Repair bool
}

// Batch compares every item and order of Redis with Postgres under the cluster-wide lock,
// stores the run (fenced) and returns its report. ErrBusy: another run holds the lock.
func (r *Reconciler) Batch(ctx context.Context, opt BatchOptions) (*Report, error) {
	var rep *Report
	err := r.withLock(ctx, func(ctx context.Context, n int64) error {
		started := time.Now().UTC()
		id, err := r.startRun(ctx, n, started)
		if err != nil {
			return err
		}
		if r.opt.afterStart != nil {
			r.opt.afterStart(ctx)
		}
		restarts := 0
		err = r.rideThrough(ctx, "batch", func(attempt int) error {
			restarts = attempt - 1
			var err error
			rep, err = r.run(ctx, opt, n)
			return err
		})
		if rep != nil {
			rep.Restarts = restarts
		}
		if err != nil && ctx.Err() != nil {
			// Stopped (the reconciler shutting down, or the lock lost): the run's row says
			// why, not only "context canceled".
			err = fmt.Errorf("reconcile: stopped before the end of the run (%w): %w", context.Cause(ctx), err)
		}
		if rep != nil {
			rep.RunID, rep.FencingToken, rep.StartedAt = id, n, started
			rep.FinishedAt = time.Now().UTC()
			rep.DurationMs = rep.FinishedAt.Sub(started).Milliseconds()
			if s := rep.FinishedAt.Sub(started).Seconds(); s > 0 {
				rep.RowsPerSecond = float64(rep.RowsCompared) / s
			}
		}
		// The result is written even when the job was cancelled (lock lost): the fencing
		// number decides whether it is still this run's to write.
		if ferr := r.finishRun(context.WithoutCancel(ctx), id, n, rep, err); ferr != nil {
			return errors.Join(err, ferr)
		}
		return err
	})
	return rep, err
}

// candidate is an item whose first pass saw a difference: in its counters or attributes
// (counters), in the orders listed, or in the ratings of the users listed.
type candidate struct {
	item     string
	counters bool
	orders   map[string]bool
	users    map[string]bool
}

// checksItem reports whether the candidate compares the item's own keys (counters, orders).
func (c candidate) checksItem() bool { return c.counters || len(c.orders) > 0 }

func (r *Reconciler) run(ctx context.Context, opt BatchOptions, n int64) (*Report, error) {
	rep := &Report{Drift: []Drift{}, Unverified: []Unverified{}}
	redisIDs, err := r.catalog(ctx)
	if err != nil {
		return nil, err
	}
	pgIDs, err := r.pgItems(ctx)
	if err != nil {
		return nil, err
	}
	items := union(redisIDs, pgIDs)
	rep.Items = len(items)
	if r.opt.Pipeline != nil {
		if rep.InFlight.ConsumerLag, err = r.opt.Pipeline.Lag(ctx); err != nil {
			rep.InFlight.ConsumerLag = -1
		}
	}

	cands, err := r.firstPass(ctx, items, rep)
	if err != nil {
		return nil, err
	}
	rep.Candidates = 0
	for _, c := range cands {
		if c.checksItem() {
			rep.Candidates += 1 + len(c.orders)
		}
		rep.Candidates += len(c.users)
	}
	drift, unverified, rounds, err := r.confirm(ctx, cands)
	if err != nil {
		return nil, err
	}
	parked, err := r.conflictDrift(ctx)
	if err != nil {
		return nil, err
	}
	drift = append(drift, parked...)
	sortDrift(drift)
	rep.Drift, rep.Unverified, rep.Rounds = drift, unverified, rounds
	if rep.Payments, err = r.checkPayments(ctx); err != nil {
		return nil, err
	}
	if rep.Money, err = r.checkMoney(ctx, opt.Repair); err != nil {
		return nil, err
	}
	if opt.Repair && len(drift) > 0 {
		if r.opt.beforeRepair != nil {
			r.opt.beforeRepair(ctx)
		}
		if rep.Repair, err = r.repair(ctx, drift, n); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func union(a, b []string) []string {
	seen := make(map[string]bool, len(a)+len(b))
	var out []string
	for _, s := range append(append([]string{}, a...), b...) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// firstPass compares every item in full, without settling: a difference here may be an event
// in flight, so it only makes the item (and the order) a candidate for confirm.
func (r *Reconciler) firstPass(ctx context.Context, items []string, rep *Report) ([]candidate, error) {
	var mu sync.Mutex
	var cands []candidate
	backlog := map[int]int64{} // by shard: its items share one outbox stream
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.opt.Workers)
	for _, item := range items {
		g.Go(func() error {
			c, stats, err := r.scanItem(gctx, item)
			if err != nil {
				return err
			}
			if r.opt.afterScan != nil {
				r.opt.afterScan(gctx, item)
			}
			mu.Lock()
			defer mu.Unlock()
			rep.Orders += stats.orders
			rep.Pruned += stats.pruned
			rep.RowsCompared += stats.rows
			backlog[keyspace.ShardOf(item)] = stats.backlog
			if c != nil {
				cands = append(cands, *c)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for _, n := range backlog {
		rep.InFlight.OutboxBacklog += n
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].item < cands[j].item })
	return cands, nil
}

type scanStats struct {
	orders, rows, pruned int
	backlog              int64
}

// scanItem compares one item's counters, every order and every rating once.
func (r *Reconciler) scanItem(ctx context.Context, item string) (*candidate, scanStats, error) {
	var st scanStats
	snap, err := r.snapshot(ctx, item, nil)
	if err != nil {
		return nil, st, err
	}
	st.backlog = snap.backlog
	total, attrs, inPG, err := r.pgItemTotal(ctx, item)
	if err != nil {
		return nil, st, err
	}
	ro, err := r.scanOrders(ctx, item)
	if err != nil {
		return nil, st, err
	}
	st.rows = len(ro) + 2
	c := candidate{item: item, orders: map[string]bool{}, users: map[string]bool{}}
	pc := pgCounters{exists: inPG, total: total, attrs: attrs}
	seen := 0
	now := time.Now()
	err = r.pgEachOrder(ctx, item, func(id string, o pgOrder) {
		st.rows++
		if o.Status == "reserved" {
			pc.reserved += o.Qty
		}
		pc.paid += o.SoldUnits()
		x, ok := ro[id]
		if !ok && r.retired(o, now) {
			st.pruned++ // its units still count in the sums above, as in Redis's
			return
		}
		if !ok {
			c.orders[id] = true
			st.orders++
			return
		}
		seen++
		if x.user != o.User || x.qty != o.Qty || x.price != o.Price || x.status != o.Status {
			c.orders[id] = true
		}
		delete(ro, id)
	})
	if err != nil {
		return nil, st, err
	}
	st.orders += seen + len(ro)
	for id := range ro {
		c.orders[id] = true
	}
	c.counters = len(c.orders) > 0 || len(counterDrift(item, snap.counters, pc)) > 0
	rr, err := r.scanRatings(ctx, item)
	if err != nil {
		return nil, st, err
	}
	pr, err := r.pgRatings(ctx, item)
	if err != nil {
		return nil, st, err
	}
	st.rows += len(rr) + len(pr)
	for _, u := range union(keysOf(rr), keysOf(pr)) {
		if rr[u] != pr[u] {
			c.users[u] = true
		}
	}
	if c.checksItem() || len(c.users) > 0 {
		return &c, st, nil
	}
	return nil, st, nil
}

// retired reports whether Redis may no longer hold an order the record has: the pruning pass
// removed it (pruned_at), or it is final for longer than the retention and older than the
// idempotency window, so a pass may have removed it and stopped before recording that (the
// next pass records it). Its absence is no drift; its units still count in the item's sums.
func (r *Reconciler) retired(o pgOrder, now time.Time) bool {
	return o.Pruned || o.Status != "reserved" && !o.Updated.After(now.Add(-r.opt.Retention)) &&
		!o.Created.After(now.Add(-r.opt.IdempotencyTTL))
}

// counterDrift compares an item's counters.
func counterDrift(item string, rc redisCounters, pc pgCounters) []Drift {
	switch {
	case !rc.exists && !pc.exists:
		return nil
	case rc.exists && !pc.exists:
		return []Drift{{Kind: KindItemMissing, ItemID: item, Redis: "present", Postgres: ""}}
	case !rc.exists && pc.exists:
		return []Drift{{Kind: KindItemExtra, ItemID: item, Redis: "", Postgres: "present"}}
	}
	var out []Drift
	for _, f := range []struct {
		name   string
		rv, pv int64
	}{
		{"stock_total", rc.total, pc.total},
		{"stock_left", rc.left, pc.left()},
		{"reserved", rc.reserved, pc.reserved},
		{"paid", rc.paid, pc.paid},
	} {
		// stock_left is judged by the units out of it (total - left against reserved + paid),
		// so a wrong stock_total is reported once, as itself.
		if f.name == "stock_left" && rc.total-rc.left == pc.reserved+pc.paid {
			continue
		}
		if f.rv != f.pv {
			out = append(out, Drift{Kind: KindStock, ItemID: item, Field: f.name,
				Redis: strconv.FormatInt(f.rv, 10), Postgres: strconv.FormatInt(f.pv, 10)})
		}
	}
	ra, pa := rc.attrs, pc.attrs
	for _, f := range []struct{ name, rv, pv string }{
		{"name", ra.Name, pa.Name},
		{"category", ra.Category, pa.Category},
		{"price_cents", strconv.FormatInt(ra.Price, 10), strconv.FormatInt(pa.Price, 10)},
		{"per_user_limit", strconv.FormatInt(ra.PerUser, 10), strconv.FormatInt(pa.PerUser, 10)},
		{"starts_at", strconv.FormatInt(ra.StartsAtMs, 10), strconv.FormatInt(pa.StartsAtMs, 10)},
		{"ends_at", strconv.FormatInt(ra.EndsAtMs, 10), strconv.FormatInt(pa.EndsAtMs, 10)},
	} {
		if f.rv != f.pv {
			out = append(out, Drift{Kind: KindItemAttr, ItemID: item, Field: f.name, Redis: f.rv, Postgres: f.pv})
		}
	}
	return out
}

// ratingDrift compares one user's rating of an item (stars, "" = no rating).
func ratingDrift(item, user, rs, ps string) []Drift {
	if rs == ps {
		return nil
	}
	return []Drift{{Kind: KindRating, ItemID: item, UserID: user, Field: "stars", Redis: rs, Postgres: ps}}
}

// orderDrift compares one order (nil = absent on that side).
func orderDrift(item, id string, ro *redisOrder, po *pgOrder) []Drift {
	switch {
	case ro == nil && po == nil:
		return nil
	case po == nil:
		return []Drift{{Kind: KindOrderMissing, ItemID: item, OrderID: id, Redis: ro.status}}
	case ro == nil:
		return []Drift{{Kind: KindOrderExtra, ItemID: item, OrderID: id, Postgres: po.Status}}
	case otherOrder(ro, po):
		return []Drift{{Kind: KindOrderIDReused, ItemID: item, OrderID: id,
			Redis:    describeOrder(ro.user, ro.qty, ro.price, ro.status, ro.created),
			Postgres: describeOrder(po.User, po.Qty, po.Price, po.Status, po.Created.UnixMilli())}}
	}
	var out []Drift
	if ro.status != po.Status {
		out = append(out, Drift{Kind: KindOrderStatus, ItemID: item, OrderID: id, Field: "status", Redis: ro.status, Postgres: po.Status})
	}
	if ro.user != po.User {
		out = append(out, Drift{Kind: KindOrderUser, ItemID: item, OrderID: id, Field: "user_id", Redis: ro.user, Postgres: po.User})
	}
	if ro.qty != po.Qty {
		out = append(out, Drift{Kind: KindOrderQuantity, ItemID: item, OrderID: id, Field: "quantity",
			Redis: strconv.FormatInt(ro.qty, 10), Postgres: strconv.FormatInt(po.Qty, 10)})
	}
	if ro.price != po.Price {
		out = append(out, Drift{Kind: KindOrderPrice, ItemID: item, OrderID: id, Field: "price_cents",
			Redis: strconv.FormatInt(ro.price, 10), Postgres: strconv.FormatInt(po.Price, 10)})
	}
	return out
}

// otherOrder reports whether Redis and the record hold two different orders under one id, as a
// primary that lost writes and reused ids makes: created at different times (the record's is its
// order.reserved's), for another shopper, quantity or price. The record parks such events, and
// those alike but for their creation, as conflicts (record/conflict.go).
func otherOrder(ro *redisOrder, po *pgOrder) bool {
	return po.FromReservation && ro.created != po.Created.UnixMilli() &&
		(ro.user != po.User || ro.qty != po.Qty || ro.price != po.Price)
}

// describeOrder is one side's order in an order_id_reused drift.
func describeOrder(user string, qty, price int64, status string, createdMs int64) string {
	return fmt.Sprintf("user %s, quantity %d, price_cents %d, %s, created %s", user, qty, price, status,
		time.UnixMilli(createdMs).UTC().Format(time.RFC3339Nano))
}

// conflictDrift reports the order events the record parked as conflicts (their order id already
// named another order): each may be an order a shopper holds that the record lacks, until an
// operator settles it and deletes the dead letter.
func (r *Reconciler) conflictDrift(ctx context.Context) ([]Drift, error) {
	parked, err := r.db.ParkedConflicts(ctx, maxParkedReported)
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	out := make([]Drift, 0, len(parked))
	for _, c := range parked {
		out = append(out, Drift{Kind: KindConflictParked, ItemID: c.ItemID, OrderID: c.OrderID,
			Postgres: fmt.Sprintf("dead_letters %d, event %s, parked %s", c.ID, c.EventID, c.At.UTC().Format(time.RFC3339))})
	}
	return out, nil
}

// maxParkedReported bounds the parked conflicts one report lists.
const maxParkedReported = 1000

// confirm re-checks candidates in rounds until each is equal, or still differs after Postgres
// applied every event up to a Redis snapshot that has not changed since: only that is drift.
// Each round snapshots Redis with its outbox position, waits for the record to reach it, then
// compares (confirmItem). Candidates whose item kept changing go to the next round.
func (r *Reconciler) confirm(ctx context.Context, cands []candidate) ([]Drift, []Unverified, int, error) {
	drift := []Drift{}
	deadline := time.Now().Add(r.opt.SettleTimeout)
	rounds := 0
	var lastReason string
	rank := r.keys.RankOutbox()
	for len(cands) > 0 && rounds < r.opt.Rounds && time.Now().Before(deadline) {
		if rounds > 0 {
			// Busy items: give them a moment to go quiet before the next snapshot.
			if err := pause(ctx, min(time.Duration(rounds)*50*time.Millisecond, time.Second)); err != nil {
				return nil, nil, rounds, err
			}
		}
		rounds++
		snaps := make([]redisSnap, len(cands))
		rsnaps := make([]ratingSnap, len(cands))
		pos := make(map[string]events.Position, len(cands)) // by outbox stream: the newest snapshot's
		later := func(stream string, p events.Position) {
			if q, ok := pos[stream]; !ok || q.Less(p) {
				pos[stream] = p
			}
		}
		for i, c := range cands {
			if c.checksItem() {
				s, err := r.snapshot(ctx, c.item, keysOf(c.orders))
				if err != nil {
					return nil, nil, rounds, err
				}
				snaps[i] = s
				later(r.keys.Item(c.item).Outbox(), s.pos)
			}
			// Ratings travel on the ranking outbox, shared by every item: a rating of any
			// item since the snapshot makes these wait for the next round.
			if len(c.users) > 0 {
				s, err := r.ratingSnapshot(ctx, c.item, keysOf(c.users))
				if err != nil {
					return nil, nil, rounds, err
				}
				rsnaps[i] = s
				later(rank, s.pos)
			}
		}
		if rounds == 1 && r.opt.beforeSettle != nil {
			r.opt.beforeSettle(ctx)
		}
		settled := true
		if err := r.settle(ctx, pos, deadline); errors.Is(err, errUnsettled) {
			settled, lastReason = false, err.Error()
		} else if err != nil {
			return nil, nil, rounds, err
		}
		var next []candidate
		for i, c := range cands {
			rest := candidate{item: c.item, orders: map[string]bool{}, users: map[string]bool{}}
			if c.checksItem() {
				found, differing, exact, err := r.confirmItem(ctx, c, snaps[i], settled)
				if err != nil {
					return nil, nil, rounds, err
				}
				switch {
				case len(found) == 0:
				case exact:
					drift = append(drift, found...)
				default:
					rest.counters, rest.orders = true, differing
				}
			}
			if len(c.users) > 0 {
				pr, err := r.pgRatings(ctx, c.item)
				if err != nil {
					return nil, nil, rounds, err
				}
				now, err := r.streamPosition(ctx, rank)
				if err != nil {
					return nil, nil, rounds, err
				}
				exact := settled && now == rsnaps[i].pos
				for u := range c.users {
					d := ratingDrift(c.item, u, rsnaps[i].stars[u], pr[u])
					switch {
					case len(d) == 0:
					case exact:
						drift = append(drift, d...)
					default:
						rest.users[u] = true
					}
				}
			}
			if rest.checksItem() || len(rest.users) > 0 {
				next = append(next, rest)
			}
		}
		cands = next
		if !settled {
			break // no use trying again before the pipeline moves
		}
		if len(cands) > 0 {
			lastReason = "the item kept changing in every round"
		}
	}
	var unverified []Unverified
	for _, c := range cands {
		unverified = append(unverified, Unverified{ItemID: c.item, Orders: sortedKeys(c.orders),
			Users: sortedKeys(c.users), Reason: lastReason})
	}
	if len(unverified) > 0 {
		slog.Warn("reconcile: items not verified", "items", len(unverified), "reason", lastReason)
	}
	if unverified == nil {
		unverified = []Unverified{}
	}
	sortDrift(drift)
	return drift, unverified, rounds, nil
}

// confirmItem compares a candidate's counters and orders in Postgres with its Redis snapshot
// after settling: the differences found, the orders among them, and whether they are exact
// (settled, and the item's outbox position unchanged since the snapshot).
func (r *Reconciler) confirmItem(ctx context.Context, c candidate, snap redisSnap, settled bool) ([]Drift, map[string]bool, bool, error) {
	pc, po, err := r.pgState(ctx, c.item, keysOf(c.orders))
	if err != nil {
		return nil, nil, false, err
	}
	now, err := r.position(ctx, c.item)
	if err != nil {
		return nil, nil, false, err
	}
	// An unchanged position means Redis is still the snapshot and Postgres cannot be ahead of it.
	exact := settled && now == snap.pos
	var found []Drift
	differing := map[string]bool{}
	at := time.Now()
	for id := range c.orders {
		var pp *pgOrder
		if o, ok := po[id]; ok {
			pp = &o
		}
		ro := snap.orders[id]
		if ro == nil && pp != nil && r.retired(*pp, at) {
			continue
		}
		if d := orderDrift(c.item, id, ro, pp); len(d) > 0 {
			found = append(found, d...)
			differing[id] = true
			// Counters are judged as if this order agreed, so an order's drift is
			// reported once, as itself, not again as the sums it is part of.
			pc.add(pp, -1)
			if ro != nil {
				pc.add(&pgOrder{User: ro.user, Qty: ro.qty, Price: ro.price, Status: ro.status}, 1)
			}
		}
	}
	found = append(found, counterDrift(c.item, snap.counters, pc)...)
	return found, differing, exact, nil
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := keysOf(m)
	sort.Strings(out)
	return out
}

func sortDrift(d []Drift) {
	sort.Slice(d, func(i, j int) bool { return d[i].key() < d[j].key() })
}

// String names a drift for logs.
func (d Drift) String() string {
	return fmt.Sprintf("%s %s %s %s redis=%q postgres=%q", d.Kind, d.ItemID, d.OrderID, d.Field, d.Redis, d.Postgres)
}
