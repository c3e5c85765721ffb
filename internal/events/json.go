package events

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/flashsale/flashsale/internal/jsonx"
)

// AppendJSON appends the event's JSON, byte for byte what json.Marshal(e) gives, without
// reflection: the relay encodes every event it publishes, and encoding/json's reflection was
// most of that cost.
func (e Event) AppendJSON(b []byte) ([]byte, error) {
	for _, t := range []*time.Time{&e.At, e.StartsAt, e.EndsAt, e.ExpiresAt} {
		if t != nil && !plainTime(*t) {
			j, err := json.Marshal(e) // encoding/json's own error for such a time
			return append(b, j...), err
		}
	}
	b = append(b, `{"event_id":`...)
	b = jsonx.AppendString(b, e.EventID)
	b = append(b, `,"type":`...)
	b = jsonx.AppendString(b, e.Type)
	b = append(b, `,"at":`...)
	b = jsonx.AppendTime(b, e.At)
	b = appendOptString(b, `,"item_id":`, e.ItemID)
	b = appendOptString(b, `,"order_id":`, e.OrderID)
	b = appendOptString(b, `,"user_id":`, e.UserID)
	b = appendOptInt(b, `,"quantity":`, e.Quantity)
	b = appendOptInt(b, `,"price_cents":`, e.PriceCents)
	b = appendOptInt(b, `,"stars":`, e.Stars)
	b = appendOptInt(b, `,"delta":`, e.Delta)
	b = appendOptString(b, `,"name":`, e.Name)
	b = appendOptString(b, `,"category":`, e.Category)
	b = appendOptInt(b, `,"stock_total":`, e.StockTotal)
	b = appendOptInt(b, `,"per_user_limit":`, e.PerUserLimit)
	b = appendOptTime(b, `,"starts_at":`, e.StartsAt)
	b = appendOptTime(b, `,"ends_at":`, e.EndsAt)
	b = appendOptTime(b, `,"expires_at":`, e.ExpiresAt)
	b = appendOptString(b, `,"payment_id":`, e.PaymentID)
	b = appendOptString(b, `,"payment_intent":`, e.PaymentIntent)
	b = appendOptInt(b, `,"refunded_cents":`, e.RefundedCents)
	b = appendOptString(b, `,"attempt":`, e.Attempt)
	b = appendOptString(b, `,"image_url":`, e.ImageURL)
	if len(e.Outcomes) > 0 {
		j, err := json.Marshal(e.Outcomes) // sorted keys, as json.Marshal(e) gives
		if err != nil {
			return b, err
		}
		b = append(append(b, `,"outcomes":`...), j...)
	}
	return append(b, '}'), nil
}

// plainTime reports whether t encodes without error: a year of four digits and a zone offset
// of whole minutes under a day (what RFC 3339 can say).
func plainTime(t time.Time) bool {
	_, off := t.Zone()
	return t.Year() >= 0 && t.Year() <= 9999 && off%60 == 0 && off > -24*3600 && off < 24*3600
}

func appendOptString(b []byte, name, s string) []byte {
	if s == "" {
		return b
	}
	return jsonx.AppendString(append(b, name...), s)
}

func appendOptInt(b []byte, name string, n *int64) []byte {
	if n == nil {
		return b
	}
	return strconv.AppendInt(append(b, name...), *n, 10)
}

func appendOptTime(b []byte, name string, t *time.Time) []byte {
	if t == nil {
		return b
	}
	return jsonx.AppendTime(append(b, name...), *t)
}
