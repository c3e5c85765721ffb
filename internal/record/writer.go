package record

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/flashsale/flashsale/internal/events"
)

// Writer applies batches of Kafka messages to the record, each batch in one transaction.
//
// Exactly once per event_id: the transaction first inserts the batch's event ids into
// processed_events (ON CONFLICT DO NOTHING) and applies only the events that insert returned,
// so a re-delivered event (relay retry, consumer crash before its offset commit) changes
// nothing. Order of delivery does not matter either: order status only moves forward, and
// item attributes, stock totals and ratings are taken from the newest event by stream position.
//
// Each table is written with one statement whose rows travel as a single jsonb parameter
// (jsonb_to_recordset): the SQL text is constant, so it is prepared once per connection,
// whatever the batch size.
type Writer struct {
	db *gorm.DB
}

// NewWriter returns a Writer over db.
func NewWriter(db *gorm.DB) *Writer { return &Writer{db: db} }

// Result counts what a batch did.
type Result struct {
	Applied    int // events applied now
	Duplicates int // events already applied (or twice in the batch)
	Invalid    int // messages parked in dead_letters
}

// parsed is one valid event of a batch with where it came from.
type parsed struct {
	ev  events.Event
	pos events.Position
	msg *kafka.Message
}

// Apply writes one batch of messages in one transaction. Invalid messages are parked in
// dead_letters in the same transaction. An error means nothing of the batch was written.
func (w *Writer) Apply(ctx context.Context, msgs []kafka.Message) (Result, error) {
	var res Result
	var valid []parsed
	var dead []DeadLetter
	seen := make(map[string]bool, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		ev, err := events.Parse(m.Value)
		var pos events.Position
		if err == nil {
			pos, err = ev.Position()
		}
		if err != nil {
			dead = append(dead, DeadLetter{
				Topic: m.Topic, KafkaPartition: m.Partition, KafkaOffset: m.Offset,
				Key: m.Key, Value: m.Value, Error: err.Error(), ReceivedAt: time.Now(),
			})
			continue
		}
		if seen[ev.EventID] {
			res.Duplicates++
			continue
		}
		seen[ev.EventID] = true
		valid = append(valid, parsed{ev: ev, pos: pos, msg: m})
	}
	res.Invalid = len(dead)

	err := w.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if len(dead) > 0 {
			if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&dead).Error; err != nil {
				return fmt.Errorf("dead letters: %w", err)
			}
		}
		if len(valid) == 0 {
			return nil
		}
		fresh, err := claimEvents(tx, valid)
		if err != nil {
			return err
		}
		res.Duplicates += len(valid) - len(fresh)
		res.Applied = len(fresh)
		return applyEvents(tx, fresh)
	})
	if err != nil {
		return Result{}, fmt.Errorf("record: apply batch of %d: %w", len(msgs), err)
	}
	return res, nil
}

// claimEvents records the events in processed_events and returns those not recorded before.
func claimEvents(tx *gorm.DB, valid []parsed) ([]parsed, error) {
	type row struct {
		EventID   string `json:"event_id"`
		Type      string `json:"type"`
		Partition int    `json:"kafka_partition"`
		Offset    int64  `json:"kafka_offset"`
	}
	rows := make([]row, len(valid))
	for i, p := range valid {
		rows[i] = row{p.ev.EventID, p.ev.Type, p.msg.Partition, p.msg.Offset}
	}
	js, err := json.Marshal(rows)
	if err != nil {
		return nil, err
	}
	var ids []string
	// processed_at is the wall clock of the insert (not the transaction start), so
	// processed_at minus the event's time is its delay through the pipeline.
	err = tx.Raw(`INSERT INTO processed_events (event_id, type, kafka_partition, kafka_offset, processed_at)
		SELECT event_id, type, kafka_partition, kafka_offset, clock_timestamp()
		FROM jsonb_to_recordset(?::jsonb) AS x(event_id text, type text, kafka_partition int, kafka_offset bigint)
		ON CONFLICT (event_id) DO NOTHING
		RETURNING event_id`, string(js)).Scan(&ids).Error
	if err != nil {
		return nil, fmt.Errorf("processed events: %w", err)
	}
	isNew := make(map[string]bool, len(ids))
	for _, id := range ids {
		isNew[id] = true
	}
	fresh := valid[:0:0]
	for _, p := range valid {
		if isNew[p.ev.EventID] {
			fresh = append(fresh, p)
		}
	}
	return fresh, nil
}

// Rows of one batch, folded so each table row appears once (an upsert may touch a row only
// once per statement).
type (
	itemRow struct {
		ID           string     `json:"id"`
		Name         string     `json:"name"`
		Category     string     `json:"category"`
		PriceCents   int64      `json:"price_cents"`
		StockTotal   int64      `json:"stock_total"`
		PerUserLimit int64      `json:"per_user_limit"`
		StartsAt     *time.Time `json:"starts_at"`
		EndsAt       *time.Time `json:"ends_at"`
		AttrPosMs    int64      `json:"attr_pos_ms"`
		AttrPosSeq   int64      `json:"attr_pos_seq"`
		StockPosMs   int64      `json:"stock_pos_ms"`
		StockPosSeq  int64      `json:"stock_pos_seq"`
	}
	orderRow struct {
		ID         string    `json:"id"`
		ItemID     string    `json:"item_id"`
		UserID     string    `json:"user_id"`
		Quantity   int64     `json:"quantity"`
		PriceCents int64     `json:"price_cents"`
		Status     string    `json:"status"`
		CreatedAt  time.Time `json:"created_at"`
		UpdatedAt  time.Time `json:"updated_at"`
	}
	ratingRow struct {
		ItemID    string    `json:"item_id"`
		UserID    string    `json:"user_id"`
		Stars     int64     `json:"stars"`
		PosMs     int64     `json:"pos_ms"`
		PosSeq    int64     `json:"pos_seq"`
		UpdatedAt time.Time `json:"updated_at"`
	}
	movementRow struct {
		EventID    string    `json:"event_id"`
		ItemID     string    `json:"item_id"`
		Kind       string    `json:"kind"`
		Delta      int64     `json:"delta"`
		OrderID    *string   `json:"order_id"`
		StockTotal *int64    `json:"stock_total"`
		At         time.Time `json:"at"`
	}
)

// statusRank mirrors the SQL function order_status_rank.
func statusRank(s string) int {
	if s == "reserved" {
		return 0
	}
	return 1
}

// applyEvents folds the batch's new events into rows and writes them.
func applyEvents(tx *gorm.DB, fresh []parsed) error {
	items := map[string]*itemRow{}
	orders := map[string]*orderRow{}
	ratings := map[[2]string]*ratingRow{}
	var itemOrder, orderOrder []string
	var ratingOrder [][2]string
	var moves []movementRow

	item := func(id string) *itemRow {
		r := items[id]
		if r == nil {
			r = &itemRow{ID: id}
			items[id] = r
			itemOrder = append(itemOrder, id)
		}
		return r
	}
	setStock := func(r *itemRow, p parsed) {
		if pos := (events.Position{Ms: r.StockPosMs, Seq: r.StockPosSeq}); pos.Less(p.pos) {
			r.StockTotal, r.StockPosMs, r.StockPosSeq = *p.ev.StockTotal, p.pos.Ms, p.pos.Seq
		}
	}
	for _, p := range fresh {
		e := p.ev
		switch e.Type {
		case events.ItemUpserted:
			r := item(e.ItemID)
			if pos := (events.Position{Ms: r.AttrPosMs, Seq: r.AttrPosSeq}); pos.Less(p.pos) {
				r.Name, r.Category, r.PriceCents, r.PerUserLimit = e.Name, e.Category, *e.PriceCents, *e.PerUserLimit
				r.StartsAt, r.EndsAt = e.StartsAt, e.EndsAt
				r.AttrPosMs, r.AttrPosSeq = p.pos.Ms, p.pos.Seq
			}
			setStock(r, p)
		case events.StockAdjusted:
			setStock(item(e.ItemID), p)
			moves = append(moves, movementRow{EventID: e.EventID, ItemID: e.ItemID, Kind: "adjusted",
				Delta: *e.Delta, StockTotal: e.StockTotal, At: e.At})
		case events.OrderReserved, events.OrderPaid, events.OrderCancelled, events.OrderExpired:
			status := strings.TrimPrefix(e.Type, "order.")
			o := orders[e.OrderID]
			if o == nil {
				o = &orderRow{ID: e.OrderID, ItemID: e.ItemID, UserID: e.UserID, Quantity: *e.Quantity,
					PriceCents: *e.PriceCents, Status: status, CreatedAt: e.At, UpdatedAt: e.At}
				orders[e.OrderID] = o
				orderOrder = append(orderOrder, e.OrderID)
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
			oid := e.OrderID
			switch e.Type {
			case events.OrderReserved:
				moves = append(moves, movementRow{EventID: e.EventID, ItemID: e.ItemID, Kind: "reserved",
					Delta: -*e.Quantity, OrderID: &oid, At: e.At})
			case events.OrderCancelled, events.OrderExpired:
				moves = append(moves, movementRow{EventID: e.EventID, ItemID: e.ItemID, Kind: "returned",
					Delta: *e.Quantity, OrderID: &oid, At: e.At})
			}
		case events.RatingSet:
			k := [2]string{e.ItemID, e.UserID}
			r := ratings[k]
			if r == nil {
				r = &ratingRow{ItemID: e.ItemID, UserID: e.UserID}
				ratings[k] = r
				ratingOrder = append(ratingOrder, k)
			}
			if pos := (events.Position{Ms: r.PosMs, Seq: r.PosSeq}); pos.Less(p.pos) {
				r.Stars, r.PosMs, r.PosSeq, r.UpdatedAt = *e.Stars, p.pos.Ms, p.pos.Seq, e.At
			}
		}
	}

	itemRows := make([]*itemRow, len(itemOrder))
	for i, id := range itemOrder {
		itemRows[i] = items[id]
	}
	orderRows := make([]*orderRow, len(orderOrder))
	for i, id := range orderOrder {
		orderRows[i] = orders[id]
	}
	ratingRows := make([]*ratingRow, len(ratingOrder))
	for i, k := range ratingOrder {
		ratingRows[i] = ratings[k]
	}
	if err := execRows(tx, "items", upsertItems, itemRows); err != nil {
		return err
	}
	if err := execRows(tx, "orders", upsertOrders, orderRows); err != nil {
		return err
	}
	if err := execRows(tx, "ratings", upsertRatings, ratingRows); err != nil {
		return err
	}
	return execRows(tx, "stock movements", insertMovements, moves)
}

// execRows runs one statement with rows as its jsonb parameter; nothing for no rows.
func execRows[T any](tx *gorm.DB, what, sql string, rows []T) error {
	if len(rows) == 0 {
		return nil
	}
	js, err := json.Marshal(rows)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := tx.Exec(sql, string(js)).Error; err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// newer sets each column from the new row only when the new row's position is later.
func newer(table string, pos [2]string, cols ...string) string {
	cond := fmt.Sprintf("(excluded.%s, excluded.%s) > (%s.%s, %s.%s)", pos[0], pos[1], table, pos[0], table, pos[1])
	var b strings.Builder
	for i, c := range append(cols, pos[0], pos[1]) {
		if i > 0 {
			b.WriteString(",\n\t")
		}
		fmt.Fprintf(&b, "%s = CASE WHEN %s THEN excluded.%s ELSE %s.%s END", c, cond, c, table, c)
	}
	return b.String()
}

var (
	upsertItems = `INSERT INTO items AS i (id, name, category, price_cents, stock_total, per_user_limit,
		starts_at, ends_at, attr_pos_ms, attr_pos_seq, stock_pos_ms, stock_pos_seq, updated_at)
	SELECT id, name, category, price_cents, stock_total, per_user_limit, starts_at, ends_at,
		attr_pos_ms, attr_pos_seq, stock_pos_ms, stock_pos_seq, now()
	FROM jsonb_to_recordset(?::jsonb) AS x(id text, name text, category text, price_cents bigint,
		stock_total bigint, per_user_limit bigint, starts_at timestamptz, ends_at timestamptz,
		attr_pos_ms bigint, attr_pos_seq bigint, stock_pos_ms bigint, stock_pos_seq bigint)
	ON CONFLICT (id) DO UPDATE SET
	` + newer("i", [2]string{"attr_pos_ms", "attr_pos_seq"}, "name", "category", "price_cents", "per_user_limit", "starts_at", "ends_at") + `,
	` + newer("i", [2]string{"stock_pos_ms", "stock_pos_seq"}, "stock_total") + `,
	updated_at = now()`

	upsertOrders = `INSERT INTO orders AS o (id, item_id, user_id, quantity, price_cents, status, created_at, updated_at)
	SELECT id, item_id, user_id, quantity, price_cents, status, created_at, updated_at
	FROM jsonb_to_recordset(?::jsonb) AS x(id text, item_id text, user_id text, quantity bigint,
		price_cents bigint, status text, created_at timestamptz, updated_at timestamptz)
	ON CONFLICT (id) DO UPDATE SET
	status = CASE WHEN order_status_rank(excluded.status) > order_status_rank(o.status) THEN excluded.status ELSE o.status END,
	created_at = LEAST(o.created_at, excluded.created_at),
	updated_at = GREATEST(o.updated_at, excluded.updated_at)`

	upsertRatings = `INSERT INTO ratings AS r (item_id, user_id, stars, pos_ms, pos_seq, updated_at)
	SELECT item_id, user_id, stars, pos_ms, pos_seq, updated_at
	FROM jsonb_to_recordset(?::jsonb) AS x(item_id text, user_id text, stars smallint, pos_ms bigint,
		pos_seq bigint, updated_at timestamptz)
	ON CONFLICT (item_id, user_id) DO UPDATE SET
	` + newer("r", [2]string{"pos_ms", "pos_seq"}, "stars", "updated_at")

	insertMovements = `INSERT INTO stock_movements (event_id, item_id, kind, delta, order_id, stock_total, at)
	SELECT event_id, item_id, kind, delta, order_id, stock_total, at
	FROM jsonb_to_recordset(?::jsonb) AS x(event_id text, item_id text, kind text, delta bigint,
		order_id text, stock_total bigint, at timestamptz)
	ON CONFLICT (event_id) DO NOTHING`
)
