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
	"sync/atomic"
	"time"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/record"
)

// Pruning (FLASHSALE_ORDER_RETENTION): a final order the record holds as final leaves Redis once
// the retention has passed since it became final, never within the idempotency window. Passes
// run under batch and restore's lock, and prune.lua re-checks each order against the record, so
// an order is removed once, as the record holds it (docs/design.md, "Order retention").

const (
	// prunePage is how many orders one Postgres read returns.
	prunePage = 2000
	// pruneChunk is how many orders of one item one prune.lua call takes (its bound).
	pruneChunk = 500
	// DefaultPruneMax bounds the orders one pass examines, so a first pass over a long history
	// holds the lock for minutes at most; the next pass goes on.
	DefaultPruneMax = 100_000
)

// PruneInterval is how often the reconciler runs a pruning pass for a retention: an eighth of
// it, at least every minute and at most every 100ms.
func PruneInterval(retention time.Duration) time.Duration {
	return min(max(retention/8, 100*time.Millisecond), time.Minute)
}

// PruneResult counts what one pass did with the orders it examined.
type PruneResult struct {
	Examined int `json:"examined"`
	// Pruned left Redis in this pass; Gone were no longer there (a pass that stopped before
	// recording them, or lost with Redis). Both are recorded as pruned.
	Pruned int `json:"pruned"`
	Gone   int `json:"gone"`
	// Kept, by why: open (reserved in Redis: its final event has not been applied there, or
	// drift), differs (other content than the record's), young (within the idempotency window
	// by Redis's clock), payment (a refund in flight), restoring (its item is being restored).
	Open      int `json:"open"`
	Differs   int `json:"differs"`
	Young     int `json:"young"`
	Payment   int `json:"payment"`
	Restoring int `json:"restoring"`
	// PaymentIndex counts payment id index entries removed.
	PaymentIndex int   `json:"payment_index"`
	DurationMs   int64 `json:"duration_ms"`
}

// Kept is every examined order that stays in Redis.
func (p PruneResult) Kept() int { return p.Open + p.Differs + p.Young + p.Payment + p.Restoring }

// pruned counts orders pruned by this process (for flashsale_orders_pruned_total).
var pruned atomic.Int64

// PrunedTotal is the number of orders pruning passes of this process removed from Redis.
func PrunedTotal() int64 { return pruned.Load() }

// Prune runs one pruning pass under the cluster-wide lock. ErrBusy: a batch, restore or another
// pass holds it.
func (r *Reconciler) Prune(ctx context.Context) (PruneResult, error) {
	var res PruneResult
	err := r.withLock(ctx, func(ctx context.Context, n int64) error {
		started := time.Now()
		err := r.prunePass(ctx, n, started, &res)
		res.DurationMs = time.Since(started).Milliseconds()
		return err
	})
	return res, err
}

// PruneEvery runs a pruning pass every interval until ctx ends (interval 0: never), logging
// each pass's counts. Every reconciler instance may run it: the lock lets one pass run at a
// time, and one that finds the lock held waits for its next turn.
func (r *Reconciler) PruneEvery(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		res, err := r.Prune(ctx)
		switch {
		case errors.Is(err, ErrBusy):
			slog.Debug("order pruning skipped", "reason", err)
		case err != nil:
			if ctx.Err() == nil {
				slog.Error("order pruning failed", "err", err, "pruned", res.Pruned)
			}
		case res.Examined > 0:
			slog.Info("order pruning pass", "examined", res.Examined, "pruned", res.Pruned, "gone", res.Gone,
				"kept", res.Kept(), "open", res.Open, "differs", res.Differs, "young", res.Young,
				"payment", res.Payment, "restoring", res.Restoring, "ms", res.DurationMs)
		}
	})
}

func (r *Reconciler) prunePass(ctx context.Context, n int64, now time.Time, res *PruneResult) error {
	finalBefore := now.Add(-r.opt.Retention)
	createdBefore := now.Add(-r.opt.IdempotencyTTL)
	var cursor record.PruneCursor
	for res.Examined < r.opt.PruneMax {
		page, next, err := r.db.PrunableOrders(ctx, finalBefore, createdBefore, cursor, min(prunePage, r.opt.PruneMax-res.Examined))
		if err != nil {
			return fmt.Errorf("reconcile: prune: %w", err)
		}
		if len(page) == 0 {
			return nil
		}
		res.Examined += len(page)
		if err := r.prunePage(ctx, n, page, res); err != nil {
			return err
		}
		cursor = next
	}
	return nil
}

// prunePage prunes one page of the record's prunable orders: prune.lua per item and chunk,
// then the payment index entries of the orders it removed, then the record's marks. What was
// removed before an error is recorded too (a refused fence refuses that as well; the next pass
// then finds those orders gone).
func (r *Reconciler) prunePage(ctx context.Context, n int64, page []record.PrunableOrder, res *PruneResult) error {
	byItem := map[string][]record.PrunableOrder{}
	for _, o := range page {
		byItem[o.Item] = append(byItem[o.Item], o)
	}
	items := make([]string, 0, len(byItem))
	for item := range byItem {
		items = append(items, item)
	}
	sort.Strings(items)
	var done []string            // orders Redis no longer holds
	var index []exactlyonce.Call // their payment index entries
	var err error
	for _, item := range items {
		if err = r.pruneItem(ctx, n, item, byItem[item], res, &done, &index); err != nil {
			break
		}
	}
	if len(index) > 0 {
		for i, cmd := range prunePaymentScript.RunEach(ctx, r.rdb, index) {
			if v, cerr := cmd.Int64(); cerr == nil {
				res.PaymentIndex += int(v)
			} else {
				// Not fatal: the entry expires with its TTL (orders.paymentIndexTTL).
				slog.Warn("order pruning: payment index entry not removed", "key", index[i].Keys[0], "err", cerr)
			}
		}
	}
	if merr := r.db.MarkPruned(ctx, LockName, n, done, time.Now()); merr != nil {
		err = errors.Join(err, fmt.Errorf("reconcile: prune: %w", merr))
	}
	return err
}

// pruneItem runs prune.lua over one item's orders of the page, chunk by chunk, adding the
// orders Redis no longer holds to done and their payment index entries to index.
func (r *Reconciler) pruneItem(ctx context.Context, n int64, item string, orders []record.PrunableOrder,
	res *PruneResult, done *[]string, index *[]exactlyonce.Call) error {
	if !keyspace.ValidID(item) {
		return nil // not an id the api makes: nothing of it is in Redis under this name
	}
	for chunk := range slices.Chunk(orders, pruneChunk) {
		outcomes, err := r.pruneChunk(ctx, n, item, chunk)
		if err != nil {
			return err
		}
		if outcomes == nil {
			res.Restoring += len(chunk)
			continue
		}
		for i, out := range outcomes {
			oid := chunk[i].ID
			switch kind, pid, _ := strings.Cut(out, "|"); kind {
			case "pruned":
				res.Pruned++
				pruned.Add(1)
				*done = append(*done, oid)
				if pid != "" {
					*index = append(*index, exactlyonce.Call{Keys: []string{r.keys.PaymentOrder(pid)}, Args: []any{oid}})
				}
			case "gone":
				res.Gone++
				*done = append(*done, oid)
			case "open":
				res.Open++
			case "differs":
				res.Differs++
			case "young":
				res.Young++
			case "payment":
				res.Payment++
			default:
				return fmt.Errorf("reconcile: prune %s: unknown outcome %q", oid, out)
			}
		}
	}
	return nil
}

// pruneChunk runs prune.lua on up to pruneChunk orders of one item and returns one outcome per
// order, or nil when the item is being restored. A newer restore of the item: ErrFenced.
func (r *Reconciler) pruneChunk(ctx context.Context, n int64, item string, chunk []record.PrunableOrder) ([]string, error) {
	k := r.keys.Item(item)
	keys := []string{k.Orders(), k.Payments(), k.RestoreFence(), k.Restoring(), k.UserOrders()}
	args := make([]any, 0, 3+2*len(chunk))
	args = append(args, item, n, r.opt.IdempotencyTTL.Milliseconds())
	for _, o := range chunk {
		args = append(args, o.ID, o.User+"|"+strconv.FormatInt(o.Qty, 10)+"|"+strconv.FormatInt(o.Price, 10)+"|"+o.Status)
	}
	reply, err := pruneScript.Run(ctx, r.rdb, keys, args...).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("reconcile: prune orders of %s: %w", item, err)
	}
	switch {
	case len(reply) == 1 && reply[0] == "restoring":
		return nil, nil
	case len(reply) == 1 && reply[0] == "fenced":
		return nil, fmt.Errorf("reconcile: prune orders of %s: %w: a newer restore wrote the item", item, ErrFenced)
	case len(reply) != 1+len(chunk) || reply[0] != "ok":
		return nil, fmt.Errorf("reconcile: prune orders of %s: unexpected reply %q", item, reply)
	}
	// The orders gone from Redis leave their users' order indexes too (another slot, so not
	// in the script). Not fatal: a reader skips an entry whose order is gone.
	byUser := map[string][]string{}
	for i, out := range reply[1:] {
		if kind, _, _ := strings.Cut(out, "|"); kind == "pruned" || kind == "gone" {
			byUser[chunk[i].User] = append(byUser[chunk[i].User], chunk[i].ID)
		}
	}
	if err := orders.NewIndex(r.rdb, r.keys).Remove(ctx, byUser); err != nil {
		slog.Warn("order pruning: order index entries not removed", "item", item, "err", err)
	}
	return reply[1:], nil
}
