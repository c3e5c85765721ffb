package record

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flashsale/flashsale/internal/events"
)

// An order id names one order for ever, but a promoted primary that lost writes may reuse one.
// An order event that meets its id with other content (item, user, quantity, price, or, for the
// event that creates it, the creation time) is parked in dead_letters as a conflict for an
// operator, never merged: that would blend two shoppers' orders into one row.

// conflictsWithin parks the order events of one batch that contradict an earlier event of the
// same order id in the batch; it returns the events kept and the letters.
func conflictsWithin(valid []parsed) ([]parsed, []DeadLetter) {
	first := map[string]*events.Event{}   // order id -> its first event in the batch
	created := map[string]*events.Event{} // order id -> its order.reserved in the batch
	var dead []DeadLetter
	kept := valid[:0:0]
	for i := range valid {
		e := &valid[i].ev
		if !isOrderEvent(e.Type) {
			kept = append(kept, valid[i])
			continue
		}
		f, c := first[e.OrderID], created[e.OrderID]
		if (f != nil && !sameOrder(f, e.ItemID, e.UserID, *e.Quantity, *e.PriceCents)) ||
			(c != nil && e.Type == events.OrderReserved && !c.At.Equal(e.At)) {
			dead = append(dead, conflictLetter(valid[i]))
			continue
		}
		if f == nil {
			first[e.OrderID] = e
		}
		if c == nil && e.Type == events.OrderReserved {
			created[e.OrderID] = e
		}
		kept = append(kept, valid[i])
	}
	return kept, dead
}

// storedOrder is what the record holds of an order, to compare an event with.
type storedOrder struct {
	item, user      string
	quantity, price int64
	createdMicros   int64 // Unix microseconds
	reserved        bool  // its order.reserved was recorded (expires_at is set by it alone)
}

// selectOrders reads the stored orders among the ids, locked until the transaction ends; the
// creation time as Unix microseconds (what a timestamptz holds).
var selectOrders = stmt{"record_select_orders", `SELECT id, item_id, user_id, quantity, price_cents,
		(extract(epoch from created_at) * 1000000)::bigint, expires_at IS NOT NULL
	FROM orders WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`}

// queueSelectOrders queues the read of the stored orders of the events' order ids into into.
func queueSelectOrders(b *txBatch, fresh []parsed, into map[string]storedOrder) {
	var ids []string
	seen := map[string]bool{}
	for _, p := range fresh {
		if isOrderEvent(p.ev.Type) && !seen[p.ev.OrderID] {
			seen[p.ev.OrderID] = true
			ids = append(ids, p.ev.OrderID)
		}
	}
	if len(ids) == 0 {
		return
	}
	b.query(selectOrders, func(rr *pgconn.ResultReader) error {
		for rr.NextRow() {
			v := rr.Values() // text format
			qty, err1 := strconv.ParseInt(string(v[3]), 10, 64)
			price, err2 := strconv.ParseInt(string(v[4]), 10, 64)
			micros, err3 := strconv.ParseInt(string(v[5]), 10, 64)
			if err := errors.Join(err1, err2, err3); err != nil {
				return fmt.Errorf("stored order %s: %w", v[0], err)
			}
			into[string(v[0])] = storedOrder{item: string(v[1]), user: string(v[2]), quantity: qty, price: price,
				createdMicros: micros, reserved: string(v[6]) == "t"}
		}
		return nil
	}, ids)
}

// conflictsStored parks the events that contradict the stored order of their id.
func conflictsStored(fresh []parsed, stored map[string]storedOrder) ([]parsed, []DeadLetter) {
	if len(stored) == 0 {
		return fresh, nil
	}
	var dead []DeadLetter
	kept := fresh[:0:0]
	for _, p := range fresh {
		e := &p.ev
		o, ok := stored[e.OrderID]
		if ok && isOrderEvent(e.Type) && (o.item != e.ItemID || o.user != e.UserID || o.quantity != *e.Quantity || o.price != *e.PriceCents ||
			(e.Type == events.OrderReserved && o.reserved && o.createdMicros != e.At.UnixMicro())) {
			dead = append(dead, conflictLetter(p))
			continue
		}
		kept = append(kept, p)
	}
	return kept, dead
}

func isOrderEvent(typ string) bool {
	switch typ {
	case events.OrderReserved, events.OrderPaid, events.OrderCancelled, events.OrderExpired, events.OrderRefunded:
		return true
	}
	return false
}

func sameOrder(e *events.Event, item, user string, qty, price int64) bool {
	return e.ItemID == item && e.UserID == user && *e.Quantity == qty && *e.PriceCents == price
}

func conflictLetter(p parsed) DeadLetter {
	m := p.msg
	return DeadLetter{Topic: m.Topic, KafkaPartition: m.Partition, KafkaOffset: m.Offset, Key: m.Key, Value: m.Value,
		Error: storableText(fmt.Sprintf(conflictPrefix+"order %s already holds other content (item, user, quantity, price or creation time); event %s parked, not merged",
			p.ev.OrderID, p.ev.EventID)),
		ReceivedAt: time.Now()}
}

// ParkedConflict is an order event parked in dead_letters because its order id already named
// another order in the record (conflictLetter).
type ParkedConflict struct {
	ID      int64 // the dead letter's
	ItemID  string
	OrderID string
	EventID string
	At      time.Time // when it was parked
}

// conflictPrefix starts the error of every parked conflict (conflictLetter).
const conflictPrefix = "conflict: "

// ParkedConflicts returns the parked conflicts still in dead_letters, oldest first, at most
// limit: each is an order a shopper may hold that the record does not, until an operator
// settles it and deletes the letter.
func (q *Queries) ParkedConflicts(ctx context.Context, limit int) ([]ParkedConflict, error) {
	rows, err := q.db.Query(ctx, `SELECT id, coalesce(convert_from(key, 'UTF8'), ''), value, received_at
		FROM dead_letters WHERE starts_with(error, $1) ORDER BY id LIMIT $2`, conflictPrefix, limit)
	if err != nil {
		return nil, fmt.Errorf("record: parked conflicts: %w", err)
	}
	defer rows.Close()
	var out []ParkedConflict
	for rows.Next() {
		var c ParkedConflict
		var value []byte
		if err := rows.Scan(&c.ID, &c.ItemID, &value, &c.At); err != nil {
			return nil, fmt.Errorf("record: parked conflicts: %w", err)
		}
		var ev struct {
			EventID string `json:"event_id"`
			ItemID  string `json:"item_id"`
			OrderID string `json:"order_id"`
		}
		if json.Unmarshal(value, &ev) == nil {
			c.EventID, c.OrderID = ev.EventID, ev.OrderID
			if ev.ItemID != "" {
				c.ItemID = ev.ItemID
			}
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
