package record

import (
	"strings"
	"time"

	"github.com/flashsale/flashsale/internal/events"
)

// batchRows are a batch's events folded into the rows they write.
type batchRows struct {
	items    []*itemRow
	orders   []*orderRow
	ratings  []*ratingRow
	moves    []movementRow
	payments []*paymentRow
	queue    []*queueRow
	tallies  []tallyRow
}

// fold folds events into one row per table row, applying the same rules the merge statements
// apply between batches: status only moves forward, the newest position wins.
func fold(fresh []parsed) batchRows {
	var f folder
	for _, p := range fresh {
		f.add(p)
	}
	return batchRows{items: f.items.list(), orders: f.orders.list(), ratings: f.ratings.list(),
		moves: f.moves, payments: f.payments.list(), queue: f.queue.list(), tallies: f.tallies}
}

// ordered holds one row per key, listed in the order the keys first came, which is the order
// the batch writes them in.
type ordered[K comparable, R any] struct {
	rows map[K]*R
	keys []K
}

// row returns the row of key k, and whether it was created by this call (zero, for the caller
// to fill).
func (o *ordered[K, R]) row(k K) (r *R, created bool) {
	if r = o.rows[k]; r != nil {
		return r, false
	}
	if o.rows == nil {
		o.rows = map[K]*R{}
	}
	r = new(R)
	o.rows[k] = r
	o.keys = append(o.keys, k)
	return r, true
}

func (o *ordered[K, R]) list() []*R {
	out := make([]*R, len(o.keys))
	for i, k := range o.keys {
		out[i] = o.rows[k]
	}
	return out
}

// folder gathers a batch's rows, one event at a time.
type folder struct {
	items    ordered[string, itemRow]
	orders   ordered[string, orderRow]
	ratings  ordered[[2]string, ratingRow]
	payments ordered[string, paymentRow]
	queue    ordered[[2]string, queueRow]
	moves    []movementRow
	tallies  []tallyRow
}

func (f *folder) add(p parsed) {
	e := p.ev
	switch e.Type {
	case events.ItemUpserted:
		r := f.item(e.ItemID, e.At)
		if pos := (events.Position{Ms: r.AttrPosMs, Seq: r.AttrPosSeq}); pos.Less(p.pos) {
			r.Name, r.Category, r.PriceCents, r.PerUserLimit = e.Name, e.Category, *e.PriceCents, *e.PerUserLimit
			r.StartsAt, r.EndsAt, r.ImageURL = e.StartsAt, e.EndsAt, e.ImageURL
			r.AttrPosMs, r.AttrPosSeq = p.pos.Ms, p.pos.Seq
		}
		setStock(r, p)
	case events.StockAdjusted:
		setStock(f.item(e.ItemID, e.At), p)
		f.moves = append(f.moves, movementRow{EventID: e.EventID, ItemID: e.ItemID, Kind: "adjusted",
			Delta: *e.Delta, StockTotal: e.StockTotal, At: e.At})
	case events.OrderReserved, events.OrderPaid, events.OrderCancelled, events.OrderExpired, events.OrderRefunded:
		f.order(e)
	case events.PaymentRefunded:
		if e.RefundedCents != nil {
			f.payment(e, "succeeded") // a paid order's payment refunded in part
		} else {
			f.payment(e, "refunded")
		}
	case events.PaymentOpened:
		f.payment(e, "open")
	case events.PaymentDisputed:
		r := f.payment(e, "succeeded")
		if r.DisputedAt == nil || e.At.Before(*r.DisputedAt) {
			at := e.At
			r.DisputedAt = &at
		}
	case events.ItemArchived:
		earliest(&f.item(e.ItemID, e.At).ArchivedAt, e.At)
	case events.QueueJoined:
		earliest(&f.queueEntry(e).JoinedAt, e.At)
	case events.QueueAdmitted:
		earliest(&f.queueEntry(e).AdmittedAt, e.At)
	case events.SaleTally:
		t := tallyRow{EventID: e.EventID, ItemID: e.ItemID, At: e.At}
		for i, o := range events.TallyOutcomes {
			t.Counts[i] = e.Outcomes[o]
		}
		f.tallies = append(f.tallies, t)
	case events.RatingSet:
		r, created := f.ratings.row([2]string{e.ItemID, e.UserID})
		if created {
			*r = ratingRow{ItemID: e.ItemID, UserID: e.UserID}
		}
		if pos := (events.Position{Ms: r.PosMs, Seq: r.PosSeq}); pos.Less(p.pos) {
			r.Stars, r.PosMs, r.PosSeq, r.UpdatedAt = *e.Stars, p.pos.Ms, p.pos.Seq, e.At
		}
	}
}

// item returns item id's row; it was created no later than at.
func (f *folder) item(id string, at time.Time) *itemRow {
	r, created := f.items.row(id)
	if created {
		*r = itemRow{ID: id, CreatedAt: at}
	}
	if at.Before(r.CreatedAt) {
		r.CreatedAt = at
	}
	return r
}

func setStock(r *itemRow, p parsed) {
	if pos := (events.Position{Ms: r.StockPosMs, Seq: r.StockPosSeq}); pos.Less(p.pos) {
		r.StockTotal, r.StockPosMs, r.StockPosSeq = *p.ev.StockTotal, p.pos.Ms, p.pos.Seq
	}
}

// order folds one order event: its status, its times, its payment and its stock movement.
func (f *folder) order(e events.Event) {
	status := strings.TrimPrefix(e.Type, "order.")
	o, created := f.orders.row(e.OrderID)
	if created {
		*o = orderRow{Order: Order{ID: e.OrderID, ItemID: e.ItemID, UserID: e.UserID, Quantity: *e.Quantity,
			PriceCents: *e.PriceCents, Status: status, CreatedAt: e.At, UpdatedAt: e.At}}
	}
	if e.Type == events.OrderReserved {
		o.Reserved = true
		o.ExpiresAt = e.ExpiresAt
	}
	if statusRank(status) > statusRank(o.Status) {
		o.Status = status
	}
	if e.At.Before(o.CreatedAt) {
		o.CreatedAt = e.At
	}
	if e.At.After(o.UpdatedAt) {
		o.UpdatedAt = e.At
	}
	if e.Type == events.OrderPaid && e.PaymentID != "" {
		f.payment(e, "succeeded")
	}
	if e.Type == events.OrderRefunded {
		if e.Delta != nil && *e.Delta > o.Restocked {
			o.Restocked = *e.Delta
		}
		if e.PaymentID != "" {
			f.payment(e, "refunded")
		}
	}
	oid := e.OrderID
	switch e.Type {
	case events.OrderReserved:
		f.moves = append(f.moves, movementRow{EventID: e.EventID, ItemID: e.ItemID, Kind: "reserved",
			Delta: -*e.Quantity, OrderID: &oid, At: e.At})
	case events.OrderCancelled, events.OrderExpired:
		f.moves = append(f.moves, movementRow{EventID: e.EventID, ItemID: e.ItemID, Kind: "returned",
			Delta: *e.Quantity, OrderID: &oid, At: e.At})
	case events.OrderRefunded:
		if e.Delta != nil && *e.Delta > 0 {
			f.moves = append(f.moves, movementRow{EventID: e.EventID, ItemID: e.ItemID, Kind: "returned",
				Delta: *e.Delta, OrderID: &oid, At: e.At})
		}
	}
}

// payment folds one payment event: status open (payment.opened), succeeded (order.paid,
// and the partial refunds and disputes of a paid order) or refunded (in full).
func (f *folder) payment(e events.Event, status string) *paymentRow {
	r, created := f.payments.row(e.PaymentID)
	if created {
		*r = paymentRow{ID: e.PaymentID, OrderID: e.OrderID, Status: status,
			AmountCents: *e.Quantity * *e.PriceCents, CreatedAt: e.At, UpdatedAt: e.At}
	}
	if r.PaymentIntent == "" {
		r.PaymentIntent = e.PaymentIntent
	}
	if r.Attempt == "" {
		r.Attempt = e.Attempt
	}
	if paymentRank(status) > paymentRank(r.Status) {
		r.Status = status
	}
	if status == "refunded" {
		r.Refunded = r.AmountCents
	}
	if e.RefundedCents != nil && *e.RefundedCents > r.Refunded {
		r.Refunded = *e.RefundedCents
	}
	if e.At.Before(r.CreatedAt) {
		r.CreatedAt = e.At
	}
	if e.At.After(r.UpdatedAt) {
		r.UpdatedAt = e.At
	}
	return r
}

func (f *folder) queueEntry(e events.Event) *queueRow {
	r, created := f.queue.row([2]string{e.ItemID, e.UserID})
	if created {
		*r = queueRow{ItemID: e.ItemID, UserID: e.UserID}
	}
	return r
}

func earliest(t **time.Time, at time.Time) {
	if *t == nil || at.Before(**t) {
		*t = &at
	}
}
