package reconcile

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/flashsale/flashsale/internal/record"
)

// Record is what reconciliation and restore read from (and write their runs to) the Postgres
// record; *record.Queries is one.
type Record interface {
	RaiseFence(ctx context.Context, job string, n int64) error
	MaxFence(ctx context.Context, job string) (int64, error)
	StartRun(ctx context.Context, job string, n int64, started time.Time) (int64, error)
	FinishRun(ctx context.Context, job string, id, n int64, status string, drift []byte, errText *string) error
	ItemIDs(ctx context.Context) ([]string, error)
	ItemTotal(ctx context.Context, id string) (int64, record.ItemAttrs, bool, error)
	EachOrder(ctx context.Context, item string, f func(id string, o record.OrderState)) error
	ItemState(ctx context.Context, item string, ids []string) (record.ItemCounters, map[string]record.OrderState, error)
	Item(ctx context.Context, id string) (record.ItemRecord, bool, error)
	Ratings(ctx context.Context, item string) ([]record.RatingRecord, error)
	PrunableOrders(ctx context.Context, finalBefore, createdBefore time.Time, after record.PruneCursor, limit int) ([]record.PrunableOrder, record.PruneCursor, error)
	MarkPruned(ctx context.Context, job string, n int64, ids []string, at time.Time) error
	ParkedConflicts(ctx context.Context, limit int) ([]record.ParkedConflict, error)
}

// pgOrder is an order as the record holds it.
type pgOrder = record.OrderState

// pgCounters are an item's stock figures derived from the record.
type pgCounters struct {
	exists                bool
	total, reserved, paid int64
	attrs                 itemAttrs
}

// itemAttrs are an item's attributes, as either side holds them.
type itemAttrs = record.ItemAttrs

func (c pgCounters) left() int64 { return c.total - c.reserved - c.paid }

// add counts (sign 1) or uncounts (sign -1) an order in the sums; nil is no order.
func (c *pgCounters) add(o *pgOrder, sign int64) {
	if o == nil {
		return
	}
	if o.Status == "reserved" {
		c.reserved += sign * o.Qty
	}
	c.paid += sign * o.SoldUnits()
}

// startRun records a run as running.
func (r *Reconciler) startRun(ctx context.Context, n int64, started time.Time) (int64, error) {
	return r.db.StartRun(ctx, LockName, n, started)
}

// finishRun stores the run's report (or its failure).
func (r *Reconciler) finishRun(ctx context.Context, id, n int64, rep *Report, runErr error) error {
	status := "ok"
	var drift []byte
	var errText *string
	if rep != nil {
		var err error
		if drift, err = json.Marshal(rep); err != nil {
			return err
		}
		if !rep.Clean() {
			status = "drift"
		}
	}
	if runErr != nil {
		status = "failed"
		s := runErr.Error()
		errText = &s
	}
	return r.db.FinishRun(ctx, LockName, id, n, status, drift, errText)
}

func (r *Reconciler) pgItems(ctx context.Context) ([]string, error) { return r.db.ItemIDs(ctx) }

func (r *Reconciler) pgItemTotal(ctx context.Context, id string) (int64, itemAttrs, bool, error) {
	return r.db.ItemTotal(ctx, id)
}

func (r *Reconciler) pgEachOrder(ctx context.Context, item string, f func(id string, o pgOrder)) error {
	return r.db.EachOrder(ctx, item, f)
}

// pgState reads the item's counters and the given orders in one snapshot.
func (r *Reconciler) pgState(ctx context.Context, item string, ids []string) (pgCounters, map[string]pgOrder, error) {
	c, orders, err := r.db.ItemState(ctx, item, ids)
	return pgCounters{exists: c.Exists, total: c.Total, reserved: c.Reserved, paid: c.Paid, attrs: c.Attrs}, orders, err
}

// pgRatings reads an item's ratings in the record, user -> stars.
func (r *Reconciler) pgRatings(ctx context.Context, item string) (map[string]string, error) {
	rs, err := r.db.Ratings(ctx, item)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(rs))
	for _, x := range rs {
		out[x.User] = strconv.Itoa(x.Stars)
	}
	return out, nil
}
