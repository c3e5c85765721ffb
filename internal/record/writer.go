package record

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/segmentio/kafka-go"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/flashsale/flashsale/internal/events"
)

// Writer applies batches of Kafka messages to the record, each in one transaction, exactly
// once per event_id: only events whose ids the transaction inserts into processed_events are
// applied, so a re-delivery changes nothing. Delivery order does not matter: order status only
// moves forward; item attributes, stock totals and ratings take the newest event (merge.go).
type Writer struct {
	db *gorm.DB
	// Provider labels the payments it records (FLASHSALE_PAYMENT_PROVIDER; "" records "sim").
	Provider string
}

// NewWriter returns a Writer over db (opened by Open: gorm over pgx's database/sql driver).
func NewWriter(db *gorm.DB) *Writer { return &Writer{db: db} }

// Result counts what a batch did.
type Result struct {
	Applied    int // events applied now
	Duplicates int // events already applied (or twice in the batch)
	Invalid    int // messages parked in dead_letters (conflicts included)
	// Conflicts are order events parked in dead_letters because their order id already
	// names an order with other content (conflict.go).
	Conflicts int
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
				Key: m.Key, Value: m.Value, Error: storableText(err.Error()), ReceivedAt: time.Now(),
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
	valid, conflicts := conflictsWithin(valid)
	dead = append(dead, conflicts...)
	res.Invalid, res.Conflicts = len(dead), len(conflicts)

	// One pooled connection for the whole batch, driven through the pgx connection under
	// gorm's database/sql pool: the transaction is one pipeline (merge.go).
	err := w.db.WithContext(ctx).Connection(func(conn *gorm.DB) error {
		return withPgx(conn, func(pc *pgx.Conn) error {
			fresh, parked, err := write(ctx, pc, dead, valid, w.Provider)
			res.Duplicates += len(valid) - len(fresh) - parked
			res.Applied = len(fresh)
			res.Invalid += parked
			res.Conflicts += parked
			return err
		})
	})
	if err != nil {
		return Result{}, fmt.Errorf("record: apply batch of %d: %w", len(msgs), err)
	}
	return res, nil
}

// ApplyIsolating is Apply that never lets one event stop the record: a batch Postgres refuses
// for its data (isDataError) is halved, in order, until the refused events stand alone and are
// parked in dead_letters with Postgres's reason. Availability errors are returned as they are,
// for the caller to retry the whole batch.
func (w *Writer) ApplyIsolating(ctx context.Context, msgs []kafka.Message) (Result, error) {
	var parked int
	// Unstorable text is parked up front: left to Postgres, a newer event of the same row
	// folded over it could hide it, so parking would depend on the batching.
	if bad := unstorable(msgs); bad != nil {
		kept := make([]kafka.Message, 0, len(msgs))
		for i := range msgs {
			if reason, ok := bad[i]; ok {
				if err := w.park(ctx, &msgs[i], reason); err != nil {
					return Result{}, err
				}
				parked++
				continue
			}
			kept = append(kept, msgs[i])
		}
		msgs = kept
	}
	res, err := w.applyIsolating(ctx, msgs)
	res.Invalid += parked
	return res, err
}

// unstorable finds the messages whose event holds text Postgres cannot store, with the reason;
// nil when there are none. A NUL can only come from a "\u0000" escape (a raw NUL is not JSON),
// so only messages holding one, or invalid UTF-8, are decoded to be sure.
func unstorable(msgs []kafka.Message) map[int]error {
	var bad map[int]error
	for i := range msgs {
		v := msgs[i].Value
		if utf8.Valid(v) && !bytes.Contains(v, []byte(`\u0000`)) {
			continue
		}
		ev, err := events.Parse(v)
		if err != nil {
			continue // Apply parks it as invalid
		}
		for _, text := range [...]string{ev.EventID, ev.Type, ev.ItemID, ev.OrderID, ev.UserID, ev.Name, ev.Category} {
			if strings.IndexByte(text, 0) >= 0 || !utf8.ValidString(text) {
				if bad == nil {
					bad = map[int]error{}
				}
				bad[i] = fmt.Errorf("record: event %q holds text Postgres cannot store (a NUL byte, 0x00, or invalid UTF-8)", ev.EventID)
				break
			}
		}
	}
	return bad
}

func (w *Writer) applyIsolating(ctx context.Context, msgs []kafka.Message) (Result, error) {
	if len(msgs) == 0 {
		return Result{}, nil
	}
	res, err := w.Apply(ctx, msgs)
	if err == nil || !isDataError(err) {
		return res, err
	}
	if len(msgs) == 1 {
		if derr := w.park(ctx, &msgs[0], err); derr != nil {
			return Result{}, derr
		}
		return Result{Invalid: 1}, nil
	}
	half := len(msgs) / 2
	left, err := w.applyIsolating(ctx, msgs[:half])
	if err != nil {
		return Result{}, err
	}
	right, err := w.applyIsolating(ctx, msgs[half:])
	if err != nil {
		return Result{}, err
	}
	return Result{Applied: left.Applied + right.Applied, Duplicates: left.Duplicates + right.Duplicates,
		Invalid: left.Invalid + right.Invalid, Conflicts: left.Conflicts + right.Conflicts}, nil
}

// isDataError reports whether Postgres refused the data itself, so a retry would fail forever:
// SQLSTATE class 22 (data exception) or 23 (integrity constraint). Anything else is availability
// (class 08/53/57), or a schema bug (class 42) that must stop the record loudly rather than
// dead-letter every event.
func isDataError(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23")
}

// park stores one refused message in dead_letters with the reason, made storable: Postgres
// text holds no NUL and only valid UTF-8 (the message itself is kept as bytes).
func (w *Writer) park(ctx context.Context, m *kafka.Message, reason error) error {
	d := DeadLetter{Topic: m.Topic, KafkaPartition: m.Partition, KafkaOffset: m.Offset,
		Key: m.Key, Value: m.Value, Error: storableText(reason.Error()), ReceivedAt: time.Now()}
	if err := w.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&d).Error; err != nil {
		return fmt.Errorf("record: park %s/%d@%d: %w", m.Topic, m.Partition, m.Offset, err)
	}
	slog.Warn("reconciler: event refused by Postgres, parked in dead_letters", "partition", m.Partition,
		"offset", m.Offset, "err", d.Error)
	return nil
}

// storableText makes s valid UTF-8 without NUL, for a Postgres text column.
func storableText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", `\x00`)
}

// Rows of one batch, folded so each table row appears once (an upsert may touch a row only
// once per statement, and COPY must not meet a row twice).
type (
	// itemRow is the Item model: the batch folds events into the row it stores.
	itemRow = Item
	// orderRow is the Order model plus what the batch knows about where the row comes from.
	orderRow struct {
		Order
		// Reserved: the batch holds the order's order.reserved, the event that creates it, so
		// the row is new unless events arrived out of order (see writeNew).
		Reserved bool
	}
	ratingRow struct {
		ItemID    string
		UserID    string
		Stars     int64
		PosMs     int64
		PosSeq    int64
		UpdatedAt time.Time
	}
	// paymentRow is a payment as the batch's payment.opened, order.paid (with payment_id) and
	// payment.refunded events describe it: status only moves forward, open -> succeeded ->
	// refunded (paymentRank).
	paymentRow struct {
		ID, OrderID, Status   string
		PaymentIntent         string
		Attempt               string
		AmountCents, Refunded int64
		CreatedAt, UpdatedAt  time.Time
		DisputedAt            *time.Time
	}
	// queueRow is a shopper's first join and first admission as the batch saw them.
	queueRow = QueueEntry
	// tallyRow is one sale.tally event.
	tallyRow struct {
		EventID, ItemID string
		At              time.Time
		Counts          [len(events.TallyOutcomes)]int64
	}
	movementRow struct {
		EventID    string
		ItemID     string
		Kind       string
		Delta      int64
		OrderID    *string
		StockTotal *int64
		At         time.Time
	}
)

// statusRank mirrors the SQL function order_status_rank.
func statusRank(s string) int {
	switch s {
	case "reserved":
		return 0
	case "refunded":
		return 2
	}
	return 1
}

// paymentRank orders a payment's statuses; the SQL merge (mergePayments) follows the same.
func paymentRank(s string) int {
	switch s {
	case "open":
		return 0
	case "refunded":
		return 2
	}
	return 1
}
