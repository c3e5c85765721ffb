package events_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/flashsale/flashsale/internal/events"
)

// TestFromEntry: every entry the scripts write becomes the contract's JSON; fields that don't
// apply are omitted; malformed entries are ErrInvalid.
func TestFromEntry(t *testing.T) {
	cases := []struct {
		name   string
		id     string
		values map[string]any
		want   string // JSON, or "" for ErrInvalid
	}{
		{"reserved", events.ItemEventID("a", "1700000000000-3"),
			map[string]any{"type": "order.reserved", "at": "1700000000123", "item": "a", "order": "a.7", "user": "u", "quantity": "2", "price_cents": "0"},
			`{"event_id":"a/1700000000000-3","type":"order.reserved","at":"2023-11-14T22:13:20.123Z","item_id":"a","order_id":"a.7","user_id":"u","quantity":2,"price_cents":0}`},
		{"upserted", events.ItemEventID("a", "1-0"),
			map[string]any{"type": "item.upserted", "at": "1700000000000", "item": "a", "name": "A", "category": "c", "price_cents": "5", "stock_total": "10", "per_user_limit": "2", "starts_at": "0", "ends_at": "1700000060000"},
			`{"event_id":"a/1-0","type":"item.upserted","at":"2023-11-14T22:13:20Z","item_id":"a","price_cents":5,"name":"A","category":"c","stock_total":10,"per_user_limit":2,"ends_at":"2023-11-14T22:14:20Z"}`},
		{"adjusted", events.ItemEventID("a", "2-0"),
			map[string]any{"type": "stock.adjusted", "at": "1700000000000", "item": "a", "delta": "-3", "stock_total": "7"},
			`{"event_id":"a/2-0","type":"stock.adjusted","at":"2023-11-14T22:13:20Z","item_id":"a","delta":-3,"stock_total":7}`},
		{"rating", events.RatingEventID("3-1"),
			map[string]any{"type": "rating.set", "at": "1700000000000", "item": "a", "user": "u", "stars": "5"},
			`{"event_id":"rating:3-1","type":"rating.set","at":"2023-11-14T22:13:20Z","item_id":"a","user_id":"u","stars":5}`},
		{"paid by a provider", events.ItemEventID("a", "4-0"),
			map[string]any{"type": "order.paid", "at": "1700000000000", "item": "a", "order": "a.7", "user": "u", "quantity": "2", "price_cents": "5", "payment": "pi_123"},
			`{"event_id":"a/4-0","type":"order.paid","at":"2023-11-14T22:13:20Z","item_id":"a","order_id":"a.7","user_id":"u","quantity":2,"price_cents":5,"payment_id":"pi_123"}`},
		{"refunded", events.ItemEventID("a", "5-0"),
			map[string]any{"type": "payment.refunded", "at": "1700000000000", "item": "a", "order": "a.8", "user": "u", "quantity": "1", "price_cents": "5", "payment": "pi_124"},
			`{"event_id":"a/5-0","type":"payment.refunded","at":"2023-11-14T22:13:20Z","item_id":"a","order_id":"a.8","user_id":"u","quantity":1,"price_cents":5,"payment_id":"pi_124"}`},
		{"refund without payment", "a/1-0", map[string]any{"type": "payment.refunded", "at": "1700000000000", "item": "a", "order": "a.8", "user": "u", "quantity": "1", "price_cents": "5"}, ""},
		{"unknown type", "a/1-0", map[string]any{"type": "order.lost", "at": "1", "item": "a"}, ""},
		{"quantity not a number", "a/1-0", map[string]any{"type": "order.paid", "at": "1700000000000", "item": "a", "order": "a.1", "user": "u", "quantity": "two", "price_cents": "1"}, ""},
		{"order of another item", "a/1-0", map[string]any{"type": "order.paid", "at": "1700000000000", "item": "a", "order": "b.1", "user": "u", "quantity": "1", "price_cents": "1"}, ""},
		{"stars out of range", "rating:1-0", map[string]any{"type": "rating.set", "at": "1700000000000", "item": "a", "user": "u", "stars": "6"}, ""},
		{"no time", "a/1-0", map[string]any{"type": "stock.adjusted", "item": "a", "delta": "1", "stock_total": "1"}, ""},
		{"bad entry id", "a/x", map[string]any{"type": "stock.adjusted", "at": "1700000000000", "item": "a", "delta": "1", "stock_total": "1"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := events.FromEntry(tc.id, tc.values)
			if tc.want == "" {
				if !errors.Is(err, events.ErrInvalid) {
					t.Fatalf("got %+v, %v; want ErrInvalid", ev, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(ev)
			if string(b) != tc.want {
				t.Fatalf("got  %s\nwant %s", b, tc.want)
			}
			back, err := events.Parse(b)
			if err != nil || back.EventID != ev.EventID {
				t.Fatalf("parse back: %+v %v", back, err)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	for _, in := range []string{"", "null", "[]", "{", `{"event_id":"a/1-0"}`, strings.Repeat("x", 10)} {
		if _, err := events.Parse([]byte(in)); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", in, err)
		}
	}
}

// TestBatchEvents: a purchase batch's entry (purchase.lua) becomes one contract event per
// order, each named by OrderEventID.
func TestBatchEvents(t *testing.T) {
	evs, err := events.EntryEvents("1700000000000-4", map[string]any{"type": "order.reserved", "item": "a",
		"seq": "7", "p": "150", "c": "1700000000123", "e": "1700000600123", "b": "u|2|v|1"})
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct{ want string }{{
		`{"event_id":"a.7/1700000000000-4","type":"order.reserved","at":"2023-11-14T22:13:20.123Z","item_id":"a","order_id":"a.7","user_id":"u","quantity":2,"price_cents":150,"expires_at":"2023-11-14T22:23:20.123Z"}`}, {
		`{"event_id":"a.8/1700000000000-4","type":"order.reserved","at":"2023-11-14T22:13:20.123Z","item_id":"a","order_id":"a.8","user_id":"v","quantity":1,"price_cents":150,"expires_at":"2023-11-14T22:23:20.123Z"}`},
	} {
		if i >= len(evs) {
			t.Fatalf("%d events, want 2", len(evs))
		}
		b, _ := json.Marshal(evs[i])
		if string(b) != tc.want {
			t.Errorf("got  %s\nwant %s", b, tc.want)
		}
		if back, err := events.Parse(b); err != nil || back.EventID != evs[i].EventID {
			t.Errorf("parse back: %+v %v", back, err)
		}
	}
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2", len(evs))
	}
}
