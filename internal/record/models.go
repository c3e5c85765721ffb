// Package record owns the PostgreSQL record of the sale: the gorm models of the tables the
// migrations create, the batched writer that applies Kafka events exactly once per event_id,
// and the consumer-group loop of the reconciler.
package record

import (
	"encoding/json"
	"time"
)

// Item is a catalogue entry as the newest events describe it.
type Item struct {
	ID           string `gorm:"primaryKey"`
	Name         string
	Category     string
	PriceCents   int64
	StockTotal   int64
	PerUserLimit int64
	StartsAt     *time.Time
	EndsAt       *time.Time
	// AttrPos* and StockPos* are the stream positions of the events that set the attributes
	// and stock_total.
	AttrPosMs, AttrPosSeq   int64
	StockPosMs, StockPosSeq int64
	UpdatedAt               time.Time
	// CreatedAt is the time of the item's earliest event, ArchivedAt of its item.archived
	// (nil while on sale), ImageURL its picture ("" for none).
	CreatedAt  time.Time
	ArchivedAt *time.Time
	ImageURL   string
}

// Order is an order in its furthest known state.
type Order struct {
	ID         string `gorm:"primaryKey"`
	ItemID     string
	UserID     string
	Quantity   int64
	PriceCents int64
	Status     string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	ExpiresAt  *time.Time // when the reservation lapses (from order.reserved)
	Restocked  int64      // units a refund put back on sale (order.refunded's delta)
}

// QueueEntry is one shopper in one item's waiting room: the first join and first admission.
type QueueEntry struct {
	ItemID     string `gorm:"primaryKey"`
	UserID     string `gorm:"primaryKey"`
	JoinedAt   *time.Time
	AdmittedAt *time.Time
}

// Rating is one user's stars for one item.
type Rating struct {
	ItemID        string `gorm:"primaryKey"`
	UserID        string `gorm:"primaryKey"`
	Stars         int
	PosMs, PosSeq int64
	UpdatedAt     time.Time
}

// StockMovement is one change of an item's unsold stock.
type StockMovement struct {
	EventID    string `gorm:"primaryKey"`
	ItemID     string
	Kind       string // adjusted | reserved | returned
	Delta      int64
	OrderID    *string
	StockTotal *int64
	At         time.Time
}

// ProcessedEvent marks an event as applied.
type ProcessedEvent struct {
	EventID        string `gorm:"primaryKey"`
	Type           string
	KafkaPartition int
	KafkaOffset    int64
	ProcessedAt    time.Time
}

// DeadLetter is a message the consumer could not apply.
type DeadLetter struct {
	ID             int64 `gorm:"primaryKey"`
	Topic          string
	KafkaPartition int
	KafkaOffset    int64
	Key            []byte
	Value          []byte
	Error          string
	ReceivedAt     time.Time
}

// ReconciliationRun is one batch comparison of Redis with this record.
type ReconciliationRun struct {
	ID           int64 `gorm:"primaryKey"`
	StartedAt    time.Time
	FinishedAt   *time.Time
	Status       string
	FencingToken *int64
	Drift        json.RawMessage `gorm:"type:jsonb"`
	Error        *string
}
