package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/record"
)

// restoreChunk bounds the entries of one restore_put call, so no script runs long.
const restoreChunk = 500

// RestoreOptions choose what to rebuild.
type RestoreOptions struct {
	Items []string // these items; with All, every item of the record
	All   bool
	// Force rebuilds an item even while Redis shows it being sold (the operator knows the
	// live state is wrong). Without it such items are refused with ErrSelling.
	Force bool
}

// RestoredItem is what restore wrote for one item.
type RestoredItem struct {
	ID         string `json:"id"`
	Orders     int    `json:"orders"` // written to Redis (pruned orders stay out)
	StockTotal int64  `json:"stock_total"`
	StockLeft  int64  `json:"stock_left"`
	Reserved   int64  `json:"reserved"`
	Paid       int64  `json:"paid"`
	Seq        int64  `json:"seq"`
	Ratings    int    `json:"ratings"`
	Note       string `json:"note,omitempty"`
}

// RestoreResult lists restored and refused items.
type RestoreResult struct {
	FencingToken int64          `json:"fencing_token"`
	Restored     []RestoredItem `json:"restored"`
	Refused      []Refusal      `json:"refused"`
	// Markers is "restored" when the restore of every item wrote fresh data markers, which
	// ends a "Redis lost its data" state (internal/datamark).
	Markers string `json:"data_markers,omitempty"`
}

// Refusal is an item restore left alone, and why.
type Refusal struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// Restore rebuilds items' Redis state from Postgres after Redis lost it: item hashes, orders,
// allowances, paid units, the users' and expiry indexes, payments and their webhook index, and
// ratings and boards when a ranking store is set. It runs under batch's lock and refuses an item
// Redis shows being sold unless forced. Idempotency keys are not in the record, nor restored.
func (r *Reconciler) Restore(ctx context.Context, opt RestoreOptions) (*RestoreResult, error) {
	if !opt.All && len(opt.Items) == 0 {
		return nil, errors.New("reconcile: restore needs items or All")
	}
	res := &RestoreResult{Restored: []RestoredItem{}, Refused: []Refusal{}}
	err := r.withLock(ctx, func(ctx context.Context, n int64) error {
		res.FencingToken = n
		// Raise the stored fence first: a batch that stalled past its lock cannot record a
		// result after this restore began.
		if err := r.db.RaiseFence(ctx, LockName, n); err != nil {
			return err
		}
		ids := opt.Items
		if opt.All {
			var err error
			if ids, err = r.pgItems(ctx); err != nil {
				return err
			}
			sort.Strings(ids)
		}
		for _, id := range ids {
			if !keyspace.ValidID(id) {
				res.Refused = append(res.Refused, Refusal{ID: id, Reason: "not a valid item id"})
				continue
			}
			var item RestoredItem
			err := r.rideThrough(ctx, "restore of item "+id, func(int) error {
				var err error
				item, err = r.restoreItem(ctx, id, n, opt.Force)
				return err
			})
			var refusal *refusedError
			switch {
			case errors.As(err, &refusal):
				res.Refused = append(res.Refused, Refusal{ID: id, Reason: refusal.Error()})
			case redisGone(err):
				return fmt.Errorf("reconcile: restore %s stopped: %w; if its rebuild had begun, the item refuses sales until `reconciler restore --item %s` runs again", id, err, id)
			case err != nil:
				return fmt.Errorf("reconcile: restore %s: %w", id, err)
			default:
				res.Restored = append(res.Restored, item)
				slog.Info("restored item", "item", id, "orders", item.Orders, "stock_left", item.StockLeft)
			}
		}
		// Every item is back: Redis holds the record's data again, under fresh markers. Not
		// after a partial restore, which leaves a loss reported (and changes refused).
		if opt.All && len(res.Refused) == 0 && r.opt.Markers != nil {
			if err := r.opt.Markers.Restored(ctx); err != nil {
				return fmt.Errorf("reconcile: restore: data markers: %w", err)
			}
			res.Markers = "restored"
		}
		return nil
	})
	return res, err
}

// refusedError is an item restore refused (selling, not in the record, fenced).
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

func refuse(format string, args ...any) error {
	return &refusedError{fmt.Errorf(format, args...)}
}

// restoreItem rebuilds item id in Redis from the record, in steps: make sure nobody is selling
// it, read the record, derive the Redis state from it, write that state behind the fence.
func (r *Reconciler) restoreItem(ctx context.Context, id string, n int64, force bool) (RestoredItem, error) {
	out := RestoredItem{ID: id}
	expected, pos, err := r.restoreQuiet(ctx, id, force)
	if err != nil {
		return out, err
	}
	it, found, err := r.db.Item(ctx, id)
	if err != nil {
		return out, err
	}
	if !found {
		return out, refuse("%w", ErrNotInRecord)
	}
	st := r.restoreState(it, &out)
	if err := r.restoreWrite(ctx, id, n, it, expected, pos, &st, &out); err != nil {
		return out, err
	}
	if r.opt.Ranking != nil {
		if out.Ratings, err = r.restoreRatings(ctx, id, it.Category, out.Paid-st.refundedKept, st.soldSeq); err != nil {
			return out, err
		}
	}
	return out, nil
}

// restoreQuiet checks that the api is not selling item id (checkIdle), then waits until what
// was published is in the record. It returns the version and outbox position restore_begin.lua
// expects ("*" and "" when forced: whatever Redis holds is replaced).
func (r *Reconciler) restoreQuiet(ctx context.Context, id string, force bool) (expected, pos string, err error) {
	expected, pos = "*", ""
	if !force {
		if expected, pos, err = r.checkIdle(ctx, id); err != nil {
			return "", "", err
		}
	}
	if r.opt.Pipeline != nil {
		deadline := time.Now().Add(r.opt.SettleTimeout)
		if err := r.settle(ctx, map[string]events.Position{}, deadline); err != nil && !errors.Is(err, errUnsettled) {
			return "", "", err
		} else if err != nil && !force {
			return "", "", refuse("%w: the consumer has not applied every published event (%v)", ErrSelling, err)
		}
	}
	return expected, pos, nil
}

// itemState is an item's Redis state as the record holds it: the entries to put, the
// highest order sequence and change time the record shows, and the units of refunded orders
// that stayed sold (counted in paid, not on best sellers). soldSeq is the number
// restore_finish.lua gave the item's best-sellers figure.
type itemState struct {
	puts          []entry
	maxSeq, maxMs int64
	refundedKept  int64
	soldSeq       int64
}

// restoreState derives an item's Redis state from its record it, counting the units into out.
// Its live expiry entries (shared with the shard's other items) leave before the record's go
// in (restoreWrite); its user orders hash goes with its other hashes (restore_begin.lua).
func (r *Reconciler) restoreState(it record.ItemRecord, out *RestoredItem) itemState {
	orders := it.Orders
	var puts []entry
	byUser := map[string][]int64{} // user -> sequence numbers of the user's orders
	held := map[string]int64{}
	paidBy := map[string]int64{}
	var maxSeq, maxMs int64 = 0, max(it.AttrMs, it.StMs)
	var refundedKept int64
	ttl := r.opt.ReservationTTL.Milliseconds()
	for _, o := range orders {
		created := o.Created.UnixMilli()
		expires := created + ttl
		if o.Expires != nil {
			expires = o.Expires.UnixMilli() // its own expiry, not a new one
		}
		maxMs = max(maxMs, o.Updated.UnixMilli(), created)
		seq, hasSeq := int64(0), false
		if _, seqS, ok := strings.Cut(o.ID, "."); ok {
			if s, err := strconv.ParseInt(seqS, 10, 64); err == nil {
				seq, hasSeq = s, true
				maxSeq = max(maxSeq, s)
			}
		}
		// An order the pruning pass removed stays out of Redis, its user's order list included
		// (only its units count, below): the record alone keeps it.
		if !o.Pruned {
			if hasSeq {
				byUser[o.User] = append(byUser[o.User], seq)
			}
			packed := fmt.Sprintf("%s|%d|%d|%s|%d|%d", o.User, o.Qty, o.Price, o.Status, created, expires)
			puts = append(puts, entry{kind: "order", a: o.ID, b: packed})
			if rec := paymentRecord(o.Payment); rec != "" {
				puts = append(puts, entry{kind: "pay", a: o.ID, b: rec})
			}
			out.Orders++
		}
		switch o.Status {
		case "reserved":
			out.Reserved += o.Qty
			held[o.User] += o.Qty
			puts = append(puts, entry{kind: "exp", a: o.ID, b: strconv.FormatInt(expires, 10)})
		case "paid":
			out.Paid += o.Qty
			held[o.User] += o.Qty
			paidBy[o.User] += o.Qty
		case "refunded":
			// Units a refund did not put back on sale stay sold and count against the buyer's
			// allowance; a refunded buyer is no buyer.
			out.Paid += o.SoldUnits()
			held[o.User] += o.SoldUnits()
			refundedKept += o.SoldUnits()
		}
	}
	for user, seqs := range byUser {
		slices.Sort(seqs)
		list := make([]string, len(seqs))
		for i, s := range seqs {
			list[i] = strconv.FormatInt(s, 10)
		}
		puts = append(puts, entry{kind: "useqs", a: user, b: strings.Join(list, ",")})
	}
	for u, q := range held {
		if q <= 0 {
			continue // only refunds put back on sale: the user holds nothing (no entry, as live)
		}
		puts = append(puts, entry{kind: "held", a: u, b: strconv.FormatInt(q, 10)})
	}
	for u, q := range paidBy {
		puts = append(puts, entry{kind: "paid", a: u, b: strconv.FormatInt(q, 10)})
	}
	out.StockTotal = it.Total
	out.StockLeft = it.Total - out.Reserved - out.Paid
	if out.StockLeft < 0 {
		// The record says more was sold than loaded: sell nothing more rather than oversell.
		out.Note = fmt.Sprintf("record holds %d units more than stock_total; stock_left set to 0", -out.StockLeft)
		out.StockLeft = 0
	}
	return itemState{puts: puts, maxSeq: maxSeq, maxMs: maxMs, refundedKept: refundedKept}
}

// paymentRecord is the payments-hash record ("payment id|state|event id|attempt", as the
// orders scripts keep it) of an order's payment in the record, "" for none. The provider's
// event id is not in the record: a repeated event finds the payment settled by its state.
func paymentRecord(p *record.PaymentLink) string {
	if p == nil {
		return ""
	}
	state := p.Status // open, refunded
	if p.Status == "succeeded" {
		state = "paid"
		if p.Disputed {
			state = "disputed"
		}
	}
	return p.ID + "|" + state + "||" + p.Attempt
}

// indexRestored puts the restored orders (all but the pruned) back into their users' order
// indexes, so lists and ETags change, and their payment ids into the webhook index, both in
// other slots, before the item sells again. A user's field the record has no order for stays
// until a reader finds it empty and removes it.
func (r *Reconciler) indexRestored(ctx context.Context, it record.ItemRecord) error {
	var back []orders.Order
	for _, o := range it.Orders {
		if !o.Pruned {
			back = append(back, orders.Order{ID: o.ID, UserID: o.User, CreatedAt: o.Created})
		}
	}
	if err := orders.NewIndex(r.rdb, r.keys).Add(ctx, back); err != nil {
		return err
	}
	st := orders.NewStore(r.rdb, r.keys)
	for _, o := range it.Orders {
		if o.Pruned || o.Payment == nil {
			continue
		}
		for _, id := range []string{o.Payment.ID, o.Payment.PaymentIntent, o.Payment.Attempt} {
			if id == "" {
				continue
			}
			if err := st.IndexPayment(ctx, id, o.ID); err != nil {
				if redisGone(err) || ctx.Err() != nil {
					return err
				}
				// Indexed to another order (a provider's id reused): the index keeps the first.
				slog.Warn("restore: payment not indexed", "order", o.ID, "payment", id, "err", err)
			}
		}
	}
	return nil
}

// restoreWrite writes st behind the fence: begin (fence, re-check idle, clear; the item hash
// goes), the entries in chunks, finish (the item hash last).
func (r *Reconciler) restoreWrite(ctx context.Context, id string, n int64, it record.ItemRecord, expected, pos string, st *itemState, out *RestoredItem) error {
	k := r.keys.Item(id)
	puts, maxSeq, maxMs := st.puts, st.maxSeq, st.maxMs
	if r.opt.beforeBegin != nil {
		r.opt.beforeBegin(ctx, id)
	}
	reply, err := restoreBegin.Run(ctx, r.rdb, []string{k.RestoreFence(), k.Hash(), k.Orders(), k.Held(), k.PaidBy(), k.Outbox(), k.Changed(), k.Clock(), k.Restoring(), k.UserOrders()}, n, expected, pos, id).Slice()
	if err != nil {
		return err
	}
	switch reply[0] {
	case "fenced":
		return refuse("%w: a newer restore (fencing %v) wrote this item", ErrFenced, reply[1])
	case "moved":
		return refuse("%w: it changed after its idle check (version %v, %v events unpublished); nothing was written (use --force to override)", ErrSelling, reply[1], reply[2])
	}
	version, _ := reply[1].(int64)
	oldSeq, _ := reply[2].(int64)
	if r.opt.afterBegin != nil {
		r.opt.afterBegin(ctx, id)
	}
	out.Seq = max(maxSeq, oldSeq)
	// The item's live expiry entries (batch entries name no single order, so they are found by
	// their prefix) leave first: nothing adds one while the item hash is missing.
	drops, err := r.expiryEntries(ctx, k)
	if err != nil {
		return err
	}
	puts = append(drops, puts...)
	for i := 0; i < len(puts); i += restoreChunk {
		if err := r.put(ctx, k, n, puts[i:min(i+restoreChunk, len(puts))]); err != nil {
			return err
		}
	}

	if err := r.indexRestored(ctx, it); err != nil {
		return err
	}
	if err := r.rdb.SAdd(ctx, r.keys.Catalog(), id).Err(); err != nil {
		return err
	}
	ms := func(t *time.Time) int64 {
		if t == nil {
			return 0
		}
		return t.UnixMilli()
	}
	floor := fmt.Sprintf("%d-0", maxMs+1)
	args := []any{n, floor, id,
		"name", it.Name, "category", it.Category, "price_cents", it.Price,
		"stock_total", it.Total, "stock_left", out.StockLeft, "reserved", out.Reserved, "paid", out.Paid,
		"refunded_kept", st.refundedKept,
		"per_user_limit", it.PerUser, "starts_at", ms(it.StartsAt), "ends_at", ms(it.EndsAt),
		"archived_at", ms(it.ArchivedAt), "image_url", it.ImageURL, "seq", out.Seq, "version", version + 1}
	reply, err = restoreFinish.Run(ctx, r.rdb, []string{k.RestoreFence(), k.Hash(), k.Outbox(), k.Changed(), k.Clock(), k.Restoring()}, args...).Slice()
	if err != nil {
		return err
	}
	if reply[0] == "fenced" {
		return refuse("%w: a newer restore (fencing %v) wrote this item", ErrFenced, reply[1])
	}
	if len(reply) < 2 {
		return fmt.Errorf("restore %s: restore_finish replied %v", id, reply)
	}
	st.soldSeq, _ = reply[1].(int64)
	return nil
}

// entry is one write of restore_put.
type entry struct{ kind, a, b string }

// expiryEntries returns an "unexp" entry for each of the item's members of its shard's expiry
// index ("<item>.<seq>" and "<item>.<first>-<last>"; item ids hold no glob character).
func (r *Reconciler) expiryEntries(ctx context.Context, k keyspace.Item) ([]entry, error) {
	var out []entry
	var cursor uint64
	for {
		kv, next, err := r.rdb.ZScan(ctx, k.Expiry(), cursor, k.ID+".*", 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("reconcile: expiry entries of %s: %w", k.ID, err)
		}
		for i := 0; i < len(kv); i += 2 { // member, score
			out = append(out, entry{kind: "unexp", a: kv[i]})
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

func (r *Reconciler) put(ctx context.Context, k keyspace.Item, n int64, entries []entry) error {
	keys := []string{k.RestoreFence(), k.Orders(), k.Held(), k.PaidBy(), k.Expiry(), k.UserOrders(), k.Payments()}
	args := make([]any, 0, 1+3*len(entries))
	args = append(args, n)
	for _, e := range entries {
		args = append(args, e.kind, e.a, e.b)
	}
	reply, err := restorePut.Run(ctx, r.rdb, keys, args...).Slice()
	if err != nil {
		return err
	}
	if reply[0] == "fenced" {
		return refuse("%w: a newer restore (fencing %v) wrote this item", ErrFenced, reply[1])
	}
	return nil
}

// checkIdle refuses an item Redis shows being sold: a version that moves within QuietFor, or
// its shard's outbox events up to the newest at the start still unpublished after SettleTimeout.
// It returns the version it saw ("" for no item hash) and that outbox position, which
// restore_begin.lua checks again atomically before it deletes anything.
func (r *Reconciler) checkIdle(ctx context.Context, id string) (version, pos string, err error) {
	k := r.keys.Item(id)
	v1, err := r.rdb.HGet(ctx, k.Hash(), "version").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", "", err
	}
	p, err := r.position(ctx, id)
	if err != nil {
		return "", "", err
	}
	pos = fmtPos(p)
	if v1 != "" {
		if err := pause(ctx, r.opt.QuietFor); err != nil {
			return "", "", err
		}
		v2, err := r.rdb.HGet(ctx, k.Hash(), "version").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return "", "", err
		}
		if v2 != v1 {
			return "", "", refuse("%w: it changed within the last %s (use --force to override)", ErrSelling, r.opt.QuietFor)
		}
	}
	deadline := time.Now().Add(r.opt.SettleTimeout)
	for {
		left, err := r.rdb.XRangeN(ctx, k.Outbox(), "-", pos, 1).Result()
		if err != nil {
			return "", "", err
		}
		if len(left) == 0 {
			return v1, pos, nil
		}
		if time.Now().After(deadline) {
			return "", "", refuse("%w: events in its shard's outbox are not published yet (use --force to override)", ErrSelling)
		}
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return "", "", err
		}
	}
}

// restoreRatings replays the item's recorded ratings through the ranking store, each only where
// its user has none in Redis now, since shoppers may rate the item again meanwhile; it emits no
// events and returns the number written. Best sellers get sold exactly, numbered seq
// (restore_finish.lua), so a live payment or refund numbered above it still stands.
func (r *Reconciler) restoreRatings(ctx context.Context, id, category string, sold, seq int64) (int, error) {
	if r.opt.beforeRatings != nil {
		r.opt.beforeRatings(ctx, id)
	}
	if err := r.opt.Ranking.SetSoldAt(ctx, id, sold, seq); err != nil {
		return 0, err
	}
	ratings, err := r.db.Ratings(ctx, id)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, x := range ratings {
		if _, restored, err := r.opt.Ranking.Restore(ctx, id, category, x.User, x.Stars); err != nil {
			slog.Warn("restore: rating not replayed", "item", id, "user", x.User, "err", err)
		} else if restored {
			n++
		}
		if r.opt.afterRating != nil {
			r.opt.afterRating(ctx, id, x.User)
		}
	}
	return n, nil
}
