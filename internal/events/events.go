// Package events owns the event contract published on Kafka: the JSON form of every state
// change (see the contract's "Events"), its construction from an outbox stream entry written
// by a Lua script, and its validation by consumers.
package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/flashsale/flashsale/internal/keyspace"
)

// Event types, in the contract's words.
const (
	ItemUpserted   = "item.upserted"
	StockAdjusted  = "stock.adjusted"
	OrderReserved  = "order.reserved"
	OrderPaid      = "order.paid"
	OrderCancelled = "order.cancelled"
	OrderExpired   = "order.expired"
	RatingSet      = "rating.set"
	// PaymentRefunded: a payment that succeeded for an order already expired or cancelled was
	// refunded at the provider (the order keeps its state), or a paid order's payment was
	// refunded in part (refunded_cents: the amount refunded so far).
	PaymentRefunded = "payment.refunded"
	// OrderRefunded: a paid order's payment was refunded in full, by an admin or at the
	// provider; delta is the units put back on sale (0: they stay sold).
	OrderRefunded = "order.refunded"
	// PaymentDisputed: a paid order's charge was disputed (a chargeback).
	PaymentDisputed = "payment.disputed"
	// PaymentOpened: a checkout attempt's session was opened for a reserved order (payment_id
	// the session, attempt its flashsale_attempt), so the record knows the attempt before any
	// money moves and a restore brings the order's payment back.
	PaymentOpened = "payment.opened"
	// QueueJoined: a shopper joined an item's waiting room (again, after an unused pass ran out).
	QueueJoined = "queue.joined"
	// QueueAdmitted: a shopper at the head of an item's line was given a pass.
	QueueAdmitted = "queue.admitted"
	// SaleTally: one api instance's purchase attempts of an item in one second, by outcome
	// (Outcomes). Not a state change: it feeds the post-sale report.
	SaleTally = "sale.tally"
	// ItemArchived: an item was taken off sale for good.
	ItemArchived = "item.archived"
)

// TallyOutcomes are the outcomes a sale.tally counts, as the report names them: reserved (an
// order made) and the refusals.
var TallyOutcomes = [...]string{"reserved", "sold_out", "limit_exceeded", "rate_limited",
	"sale_not_started", "sale_ended", "queue_required"}

// ErrInvalid means an entry or a message is not a well-formed event; consumers park it.
var ErrInvalid = errors.New("invalid event")

// Event is one state change as published on Kafka. Fields that don't apply are omitted. The
// item attributes (Name ... EndsAt) are an extension carried by item.upserted only; stock_total
// is also carried by stock.adjusted.
type Event struct {
	EventID    string    `json:"event_id"`
	Type       string    `json:"type"`
	At         time.Time `json:"at"`
	ItemID     string    `json:"item_id,omitempty"`
	OrderID    string    `json:"order_id,omitempty"`
	UserID     string    `json:"user_id,omitempty"`
	Quantity   *int64    `json:"quantity,omitempty"`
	PriceCents *int64    `json:"price_cents,omitempty"`
	Stars      *int64    `json:"stars,omitempty"`
	Delta      *int64    `json:"delta,omitempty"`

	Name         string     `json:"name,omitempty"`
	Category     string     `json:"category,omitempty"`
	StockTotal   *int64     `json:"stock_total,omitempty"`
	PerUserLimit *int64     `json:"per_user_limit,omitempty"`
	StartsAt     *time.Time `json:"starts_at,omitempty"`
	EndsAt       *time.Time `json:"ends_at,omitempty"`
	// ExpiresAt is carried by order.reserved: when the reservation lapses unpaid, so a restore
	// from the record gives it back its own expiry.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// PaymentID is the provider's payment, carried by order.paid (when a provider took the
	// payment) and payment.refunded.
	PaymentID string `json:"payment_id,omitempty"`
	// PaymentIntent is the provider's PaymentIntent of the payment, when known; RefundedCents
	// what was refunded of it so far (order.refunded, payment.refunded).
	PaymentIntent string `json:"payment_intent,omitempty"`
	RefundedCents *int64 `json:"refunded_cents,omitempty"`
	// Attempt is the checkout attempt (metadata flashsale_attempt) a provider's payment was
	// made under, carried by payment.opened and order.paid.
	Attempt string `json:"attempt,omitempty"`
	// ImageURL is the item's picture, carried by item.upserted ("" for none).
	ImageURL string `json:"image_url,omitempty"`
	// Outcomes are a sale.tally's counts by outcome (TallyOutcomes); only counts above zero.
	Outcomes map[string]int64 `json:"outcomes,omitempty"`
}

// Position is where an event sits in its outbox stream: events of one stream (one item, or
// the ranking stream) are ordered by it, so a consumer can let the newer change win even when
// a relay crash re-publishes an older one late.
type Position struct{ Ms, Seq int64 }

// Less orders positions of one stream.
func (p Position) Less(q Position) bool { return p.Ms < q.Ms || (p.Ms == q.Ms && p.Seq < q.Seq) }

// ItemEventID names an entry of an item's outbox stream.
func ItemEventID(item, entryID string) string { return item + "/" + entryID }

// RatingEventID names an entry of the ranking outbox stream (item ids cannot contain ':').
func RatingEventID(entryID string) string { return "rating:" + entryID }

// OrderEventID names the order.reserved event of one order of a purchase batch's entry (see
// FromBatch): unique, as an order id holds a '.' that no item id can, and the same however
// often the entry is read again, so a re-publish after a relay crash is de-duplicated. Its
// Position is the entry's, like every other event id's.
func OrderEventID(orderID, entryID string) string { return orderID + "/" + entryID }

// Position parses the stream entry id inside the event id.
func (e Event) Position() (Position, error) {
	id := e.EventID
	if rest, ok := strings.CutPrefix(id, "rating:"); ok {
		id = rest
	} else if _, rest, ok := strings.Cut(id, "/"); ok {
		id = rest
	} else {
		return Position{}, fmt.Errorf("%w: event_id %q names no stream entry", ErrInvalid, e.EventID)
	}
	return ParseEntryID(id)
}

// ParseEntryID parses a stream entry id "<ms>-<seq>" into its Position.
func ParseEntryID(id string) (Position, error) {
	msS, seqS, ok := strings.Cut(id, "-")
	ms, err1 := strconv.ParseInt(msS, 10, 64)
	seq, err2 := strconv.ParseInt(seqS, 10, 64)
	if !ok || err1 != nil || err2 != nil || ms < 0 || seq < 0 {
		return Position{}, fmt.Errorf("%w: stream entry id %q", ErrInvalid, id)
	}
	return Position{ms, seq}, nil
}

// FromEntry builds the event of one outbox entry (eventID: ItemEventID or RatingEventID of it)
// from its flat fields. A batch's entry goes to FromBatch; a compact order.reserved entry
// (type, order, and o: the packed order) is still read for streams an older api wrote.
func FromEntry(eventID string, values map[string]any) (Event, error) {
	if packed, ok := values["o"].(string); ok && values["type"] == OrderReserved {
		order, _ := values["order"].(string)
		return fromReservation(eventID, order, packed)
	}
	f := fields{values: values}
	e := Event{
		EventID: eventID,
		Type:    f.str("type"),
		At:      time.UnixMilli(f.integer("at")).UTC(),
		ItemID:  f.str("item"),
		OrderID: f.str("order"),
		UserID:  f.str("user"),
	}
	e.PaymentID = f.str("payment")
	e.PaymentIntent = f.str("payment_intent")
	e.RefundedCents = f.opt("refunded_cents")
	e.Attempt = f.str("attempt")
	e.Quantity = f.opt("quantity")
	e.PriceCents = f.opt("price_cents")
	e.Stars = f.opt("stars")
	e.Delta = f.opt("delta")
	e.StockTotal = f.opt("stock_total")
	if e.Type == ItemUpserted {
		e.Name, e.Category = f.str("name"), f.str("category")
		e.PerUserLimit = f.opt("per_user_limit")
		e.StartsAt, e.EndsAt = f.millis("starts_at"), f.millis("ends_at")
		e.ImageURL = f.str("image_url")
	}
	if e.Type == SaleTally {
		for _, o := range TallyOutcomes {
			if n := f.integer(o); n != 0 {
				if e.Outcomes == nil {
					e.Outcomes = map[string]int64{}
				}
				e.Outcomes[o] = n
			}
		}
	}
	if e.Type == OrderReserved {
		e.ExpiresAt = f.millis("expires")
	}
	if f.err != nil {
		return Event{}, fmt.Errorf("%w: entry %s: %v", ErrInvalid, eventID, f.err)
	}
	return e, e.Validate()
}

// IsBatch reports whether an entry of an item's stream is a purchase batch (FromBatch).
func IsBatch(values map[string]any) bool {
	_, ok := values["b"]
	return ok && values["type"] == OrderReserved
}

// EntryEvents builds the events of one entry of an item's outbox stream: one per order of a
// purchase batch, else the entry's one event (named by ItemEventID).
func EntryEvents(entryID string, values map[string]any) ([]Event, error) {
	if IsBatch(values) {
		return FromBatch(entryID, values)
	}
	e, err := FromEntry(ItemEventID(EntryItem(values), entryID), values)
	if err != nil {
		return nil, err
	}
	return []Event{e}, nil
}

// FromBatch builds the order.reserved events of a purchase batch's entry, in order. The entry
// writes what the orders share once: type, item, seq (the first order's; the others follow),
// p (price_cents), c and e (created and expires, unix ms) and b ("user|quantity" of each).
func FromBatch(entryID string, values map[string]any) ([]Event, error) {
	f := fields{values: values}
	item := f.str("item")
	first, price, created, expires := f.integer("seq"), f.integer("p"), f.integer("c"), f.integer("e")
	list := f.str("b")
	bad := func(why string) error {
		return fmt.Errorf("%w: batch entry %s of %q: %s", ErrInvalid, entryID, item, why)
	}
	if f.err != nil {
		return nil, bad(f.err.Error())
	}
	if !keyspace.ValidID(item) || first < 1 || list == "" {
		return nil, bad("no item, seq or orders")
	}
	n := strings.Count(list, "|") + 1
	if n%2 != 0 {
		return nil, bad("orders are not user|quantity pairs")
	}
	n /= 2
	out := make([]Event, n)
	nums := make([]int64, 2*n) // quantity and price of each event: one allocation for all
	at := time.UnixMilli(created).UTC()
	var exp *time.Time
	if expires > 0 {
		t := time.UnixMilli(expires).UTC()
		exp = &t
	}
	prefix := item + "."
	for i := range n {
		var user, qty string
		user, list, _ = strings.Cut(list, "|")
		qty, list, _ = strings.Cut(list, "|")
		q, err := strconv.ParseInt(qty, 10, 64)
		if err != nil {
			return nil, bad(fmt.Sprintf("quantity %q", qty))
		}
		nums[2*i], nums[2*i+1] = q, price
		order := prefix + strconv.FormatInt(first+int64(i), 10)
		out[i] = Event{
			EventID: OrderEventID(order, entryID), Type: OrderReserved, At: at, ItemID: item,
			OrderID: order, UserID: user, Quantity: &nums[2*i], PriceCents: &nums[2*i+1], ExpiresAt: exp,
		}
		if err := out[i].Validate(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// EntryItem is the item an outbox entry of an item's stream belongs to: its item field, or the
// item of its order id (compact order.reserved entries); "" when neither says.
func EntryItem(values map[string]any) string {
	if item, ok := values["item"].(string); ok {
		return item
	}
	if order, ok := values["order"].(string); ok {
		if item, ok := keyspace.ItemOfOrder(order); ok {
			return item
		}
	}
	return ""
}

// fromReservation builds the order.reserved event of a compact entry.
func fromReservation(eventID, order, packed string) (Event, error) {
	var p [6]string
	rest := packed
	for i := range 5 {
		var ok bool
		if p[i], rest, ok = strings.Cut(rest, "|"); !ok {
			return Event{}, fmt.Errorf("%w: entry %s: packed order %q", ErrInvalid, eventID, packed)
		}
	}
	p[5] = rest
	var n [4]int64
	for i, s := range []string{p[1], p[2], p[4], p[5]} {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return Event{}, fmt.Errorf("%w: entry %s: packed order %q", ErrInvalid, eventID, packed)
		}
		n[i] = v
	}
	item, _ := keyspace.ItemOfOrder(order)
	nums := &[2]int64{n[0], n[1]} // quantity, price: one allocation for both
	e := Event{
		EventID: eventID, Type: OrderReserved, At: time.UnixMilli(n[2]).UTC(),
		ItemID: item, OrderID: order, UserID: p[0], Quantity: &nums[0], PriceCents: &nums[1],
	}
	if n[3] > 0 {
		t := time.UnixMilli(n[3]).UTC()
		e.ExpiresAt = &t
	}
	return e, e.Validate()
}

// Parse decodes and validates one Kafka message value: the relay's own form by decodeFast,
// anything else by encoding/json, to the same Event.
func Parse(data []byte) (Event, error) {
	if e, ok := decodeFast(data); ok {
		return e, e.Validate()
	}
	return parseJSON(data)
}

// parseJSON is Parse by encoding/json (apart, so that Parse's fast result stays on the stack).
func parseJSON(data []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(data, &e); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return e, e.Validate()
}

// Validate checks that the event carries what its type needs, so a consumer can apply it
// without guessing.
func (e Event) Validate() error {
	bad := func(why string) error { return fmt.Errorf("%w: %s %q: %s", ErrInvalid, e.Type, e.EventID, why) }
	if e.EventID == "" {
		return bad("no event_id")
	}
	if _, err := e.Position(); err != nil {
		return err
	}
	if e.At.IsZero() || e.At.Unix() <= 0 {
		return bad("no time")
	}
	if !keyspace.ValidID(e.ItemID) {
		return bad("bad item_id")
	}
	switch e.Type {
	case ItemUpserted:
		if e.Name == "" || !nonNeg(e.PriceCents) || !nonNeg(e.StockTotal) || e.PerUserLimit == nil || *e.PerUserLimit < 1 {
			return bad("incomplete item")
		}
	case StockAdjusted:
		if e.Delta == nil || *e.Delta == 0 || !nonNeg(e.StockTotal) {
			return bad("needs delta and stock_total")
		}
	case OrderReserved, OrderPaid, OrderCancelled, OrderExpired, OrderRefunded:
		item, ok := keyspace.ItemOfOrder(e.OrderID)
		if !ok || item != e.ItemID || e.UserID == "" || e.Quantity == nil || *e.Quantity < 1 || !nonNeg(e.PriceCents) {
			return bad("incomplete order")
		}
	case PaymentRefunded, PaymentDisputed:
		item, ok := keyspace.ItemOfOrder(e.OrderID)
		if !ok || item != e.ItemID || e.UserID == "" || e.PaymentID == "" || e.Quantity == nil || *e.Quantity < 1 || !nonNeg(e.PriceCents) {
			return bad("needs order_id, user_id, payment_id, quantity and price_cents")
		}
	case PaymentOpened:
		item, ok := keyspace.ItemOfOrder(e.OrderID)
		if !ok || item != e.ItemID || e.UserID == "" || e.PaymentID == "" || e.Attempt == "" || e.Quantity == nil || *e.Quantity < 1 || !nonNeg(e.PriceCents) {
			return bad("needs order_id, user_id, payment_id, attempt, quantity and price_cents")
		}
	case QueueJoined, QueueAdmitted:
		if !keyspace.ValidID(e.UserID) {
			return bad("needs user_id")
		}
	case SaleTally:
		if len(e.Outcomes) == 0 {
			return bad("needs outcomes")
		}
		for o, n := range e.Outcomes {
			if !isTallyOutcome(o) || n < 0 {
				return bad(fmt.Sprintf("outcome %q: %d", o, n))
			}
		}
	case ItemArchived:
	case RatingSet:
		if e.UserID == "" || e.Stars == nil || *e.Stars < 1 || *e.Stars > 5 {
			return bad("needs user_id and stars 1..5")
		}
	default:
		return bad("unknown type")
	}
	return nil
}

func isTallyOutcome(o string) bool {
	for _, t := range TallyOutcomes {
		if o == t {
			return true
		}
	}
	return false
}

func nonNeg(p *int64) bool { return p != nil && *p >= 0 }

// fields reads an entry's flat fields, remembering the first malformed one.
type fields struct {
	values map[string]any
	err    error
}

func (f *fields) str(name string) string {
	v, _ := f.values[name].(string)
	return v
}

func (f *fields) opt(name string) *int64 {
	s, ok := f.values[name].(string)
	if !ok {
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if f.err == nil {
			f.err = fmt.Errorf("field %s=%q is not an integer", name, s)
		}
		return nil
	}
	return &n
}

func (f *fields) integer(name string) int64 {
	if p := f.opt(name); p != nil {
		return *p
	}
	return 0
}

// millis reads a unix-ms time where 0 means none.
func (f *fields) millis(name string) *time.Time {
	if ms := f.integer(name); ms > 0 {
		t := time.UnixMilli(ms).UTC()
		return &t
	}
	return nil
}
