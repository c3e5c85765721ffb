package reconcile

import (
	"context"
	"fmt"
)

// Why some drift is not repaired: repair only brings Postgres up to Redis through events, and
// the consumer's rules (first user and quantity kept, status only forward) limit what events
// can change.
const (
	whyExtraOrder = "Redis has no such order: repair only brings Postgres up to Redis; if Redis lost data, run restore"
	whyExtraItem  = "Redis has no such item: if Redis lost it, run restore"
	whyFinal      = "the record already holds a final status; an order's status never moves back or sideways"
	whyFirst      = "the record keeps the user, quantity and price of an order's first event; correct it by hand"
	whyCounters   = "Redis's counters disagree with its own orders; that is not fixable from Redis"
	whyStill      = "still differs after its events were re-emitted and applied"
	whyRating     = "ratings are reported, not repaired: the shopper's next rating corrects the record, or correct it by hand"
	whyReused     = "two orders hold this id (a primary that lost writes to a failover made another under it): the record keeps the first; settle the shoppers by hand"
	whyParked     = "the record parked this event because its order id already named another order: settle the shopper's order by hand, then delete the dead letter"
	whyChanged    = "the order changed after the drift was confirmed, so it was not re-emitted (its own event is on the way); the next run checks it again"
)

// reemit is one call of reconcile/reemit.lua; status is the order's status the batch
// confirmed (the script sends nothing for an order no longer in it).
type reemit struct{ item, mode, order, status string }

// repair re-emits the events of every drift that events can fix, waits until they are
// applied, and checks each drift again: what still differs is reported as not fixed.
// n is the batch's fencing number: a newer batch or restore of an item refuses its re-emits.
func (r *Reconciler) repair(ctx context.Context, drift []Drift, n int64) (*Repair, error) {
	rep := &Repair{Fixed: []Drift{}, NotFixed: []NotFixed{}}
	var plan []reemit
	planned := map[reemit]bool{}
	add := func(a reemit) {
		if !planned[a] {
			planned[a] = true
			plan = append(plan, a)
		}
	}
	refused := map[string]string{}
	for _, d := range drift {
		switch d.Kind {
		case KindOrderMissing:
			add(reemit{d.ItemID, "order", d.OrderID, d.Redis})
		case KindOrderStatus:
			if d.Postgres == "reserved" {
				add(reemit{d.ItemID, "final", d.OrderID, d.Redis})
			} else {
				refused[d.key()] = whyFinal
			}
		case KindOrderUser, KindOrderQuantity, KindOrderPrice:
			refused[d.key()] = whyFirst
		case KindOrderExtra:
			refused[d.key()] = whyExtraOrder
		case KindOrderIDReused:
			refused[d.key()] = whyReused
		case KindConflictParked:
			refused[d.key()] = whyParked
		case KindItemExtra:
			refused[d.key()] = whyExtraItem
		case KindRating:
			refused[d.key()] = whyRating
		case KindItemMissing, KindItemAttr:
			add(reemit{d.ItemID, "item", "", ""})
		case KindStock:
			if d.Field == "stock_total" {
				add(reemit{d.ItemID, "item", "", ""})
			}
			// stock_left, reserved and paid follow the orders: re-checked below.
		}
	}
	changed := map[string]bool{} // order ids
	for _, a := range plan {
		k := r.keys.Item(a.item)
		reply, err := reemitScript.Run(ctx, r.rdb, []string{k.Hash(), k.Orders(), k.Outbox(), k.RestoreFence()}, a.item, a.mode, a.order, a.status, n).Slice()
		if err != nil {
			return rep, fmt.Errorf("reconcile: re-emit %s %s: %w", a.item, a.order, err)
		}
		if len(reply) == 2 && reply[0] == "fenced" {
			return rep, fmt.Errorf("reconcile: re-emit %s %s: %w (fencing number %d, item's is %v)", a.item, a.order, ErrFenced, n, reply[1])
		}
		if len(reply) == 2 && reply[0] == "changed" {
			changed[a.order] = true
		}
		if len(reply) == 2 {
			if n, ok := reply[1].(int64); ok {
				rep.Reemitted += int(n)
			}
		}
	}

	// Check again every item that had drift, with its drifting orders (ratings were not
	// repaired: nothing to check again).
	byItem := map[string]*candidate{}
	for _, d := range drift {
		if d.Kind == KindRating {
			continue
		}
		c := byItem[d.ItemID]
		if c == nil {
			c = &candidate{item: d.ItemID, counters: true, orders: map[string]bool{}}
			byItem[d.ItemID] = c
		}
		if d.OrderID != "" {
			c.orders[d.OrderID] = true
		}
	}
	cands := make([]candidate, 0, len(byItem))
	for _, c := range byItem {
		cands = append(cands, *c)
	}
	still, unverified, _, err := r.confirm(ctx, cands)
	if err != nil {
		return rep, err
	}
	left := map[string]bool{}
	for _, d := range still {
		left[d.key()] = true
	}
	unsure := map[string]string{}
	for _, u := range unverified {
		unsure[u.ItemID] = "could not verify: " + u.Reason
	}
	for _, d := range drift {
		switch why, ok := refused[d.key()]; {
		case ok:
			rep.NotFixed = append(rep.NotFixed, NotFixed{Drift: d, Reason: why})
		case unsure[d.ItemID] != "":
			rep.NotFixed = append(rep.NotFixed, NotFixed{Drift: d, Reason: unsure[d.ItemID]})
		case left[d.key()] && changed[d.OrderID]:
			rep.NotFixed = append(rep.NotFixed, NotFixed{Drift: d, Reason: whyChanged})
		case left[d.key()] && d.Kind == KindStock && d.Field != "stock_total":
			rep.NotFixed = append(rep.NotFixed, NotFixed{Drift: d, Reason: whyCounters})
		case left[d.key()]:
			rep.NotFixed = append(rep.NotFixed, NotFixed{Drift: d, Reason: whyStill})
		default:
			rep.Fixed = append(rep.Fixed, d)
		}
	}
	return rep, nil
}
