package events

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// viaJSON is what Parse returned before decodeFast: encoding/json's reading of data.
func viaJSON(data []byte) (Event, error) {
	var e Event
	err := json.Unmarshal(data, &e)
	return e, err
}

// sameAsJSON fails the test when decodeFast accepted data but encoding/json reads it
// otherwise (or refuses it).
func sameAsJSON(t *testing.T, data []byte) (fast bool) {
	t.Helper()
	got, ok := decodeFast(data)
	if !ok {
		return false
	}
	want, err := viaJSON(data)
	if err != nil {
		t.Fatalf("decodeFast took %q, encoding/json refuses it: %v", data, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeFast(%q)\n got %+v\nwant %+v", data, got, want)
	}
	return true
}

// randomEvent is an Event with random fields set. Half the time its strings are drawn to
// include what json.Marshal escapes and what it passes through (UTF-8, '<', quotes, control
// characters, invalid UTF-8), else from plain ones like the scripts write.
func randomEvent(r *rand.Rand) Event {
	strs := []string{"", "a", "a/1700000000000-3", "rating:1-0", "order.reserved", "u42", "Café ☕", "😀",
		"line\u2028sep", `say "hi"`, `back\slash`, "tab\there", "<b>&amp;</b>", "nul\x00", "bad\xffutf8"}
	plain := 8 // strs[:plain] need no escaping
	if r.IntN(2) == 0 {
		plain = len(strs)
	}
	s := func() string { return strs[r.IntN(plain)] }
	ints := []int64{0, 1, -1, 7, 1999, math.MaxInt64, math.MinInt64, 1 << 53}
	n := func() *int64 {
		if r.IntN(2) == 0 {
			return nil
		}
		v := ints[r.IntN(len(ints))]
		return &v
	}
	zones := []*time.Location{time.UTC, time.FixedZone("", 2*3600), time.FixedZone("", -(5*3600 + 30*60))}
	tm := func() time.Time {
		return time.UnixMilli(r.Int64N(4e12)).Add(time.Duration(r.IntN(1e6))).In(zones[r.IntN(len(zones))])
	}
	pt := func() *time.Time {
		if r.IntN(2) == 0 {
			return nil
		}
		v := tm()
		return &v
	}
	return Event{EventID: s(), Type: s(), At: tm(), ItemID: s(), OrderID: s(), UserID: s(),
		Quantity: n(), PriceCents: n(), Stars: n(), Delta: n(), Name: s(), Category: s(),
		StockTotal: n(), PerUserLimit: n(), StartsAt: pt(), EndsAt: pt(), ExpiresAt: pt()}
}

// TestDecodeFastMatchesJSON: on the relay's output for random events, decodeFast decodes
// exactly what encoding/json decodes, or declines; and it does not decline the common case
// (ids, types and numbers as the scripts write them).
func TestDecodeFastMatchesJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	fast := 0
	for range 20000 {
		data, err := json.Marshal(randomEvent(r))
		if err != nil {
			t.Fatal(err)
		}
		if sameAsJSON(t, data) {
			fast++
		}
	}
	if fast < 1000 {
		t.Fatalf("decodeFast took %d of 20000 random events: it declines too much", fast)
	}
	one, price := int64(1), int64(1999)
	exp := time.UnixMilli(1700000060000).UTC()
	relay, err := json.Marshal(Event{EventID: "a/1700000000000-3", Type: OrderReserved, At: time.UnixMilli(1700000000123).UTC(),
		ItemID: "a", OrderID: "a.7", UserID: "u", Quantity: &one, PriceCents: &price, ExpiresAt: &exp})
	if err != nil {
		t.Fatal(err)
	}
	if !sameAsJSON(t, relay) {
		t.Fatalf("decodeFast declined the relay's order.reserved: %s", relay)
	}
}

// TestDecodeFastDeclines: JSON outside decodeFast's subset goes to encoding/json, so its
// rules (case-insensitive keys, last duplicate wins, null, escapes, errors) stay the rules.
func TestDecodeFastDeclines(t *testing.T) {
	accepted := []string{
		`{}`, ` { "event_id" : "a/1-0" , "quantity" : -0 } `, "{\"type\":\"order.paid\",\"stars\":5}\n",
		`{"at":"2026-11-22T10:00:00.5+02:00","name":"Café"}`,
	}
	for _, in := range accepted {
		if !sameAsJSON(t, []byte(in)) {
			t.Errorf("decodeFast declined %s", in)
		}
	}
	declined := []string{
		``, `null`, `[]`, `{`, `{"event_id":"a"`, `{"event_id":"a"}x`, `{"event_id":"a",}`,
		`{"Event_ID":"a/1-0"}`, `{"event_id":"a","event_id":"b"}`, `{"other":1}`,
		`{"quantity":null}`, `{"quantity":1.0}`, `{"quantity":1e3}`, `{"quantity":01}`, `{"quantity":"1"}`,
		`{"quantity":9223372036854775808}`, `{"quantity":-}`, `{"name":"a\"b"}`, `{"name":"\u00e9"}`,
		"{\"name\":\"a\tb\"}", "{\"name\":\"\xff\"}", `{"at":"yesterday"}`, `{"at":null}`, `{"at":1}`,
		`{"type":{"x":1}}`, `{"event_id":"a" "type":"b"}`,
	}
	for _, in := range declined {
		if _, ok := decodeFast([]byte(in)); ok {
			t.Errorf("decodeFast took %q", in)
		}
	}
}

// FuzzDecodeFast: whatever decodeFast accepts, encoding/json reads the same.
//
//	go test -run '^$' -fuzz FuzzDecodeFast ./internal/events/
func FuzzDecodeFast(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		data, _ := json.Marshal(randomEvent(r))
		f.Add(data)
	}
	f.Add([]byte(`{"event_id":"a/1-0","type":"order.reserved","at":"2023-11-14T22:13:20.123Z","item_id":"a","order_id":"a.7","user_id":"u","quantity":2,"price_cents":0}`))
	f.Add([]byte(strings.Repeat(`{"a":`, 3)))
	f.Fuzz(func(t *testing.T, data []byte) { sameAsJSON(t, data) })
}

// BenchmarkParse: the relay's order.reserved through Parse (decodeFast) and through
// encoding/json.
func BenchmarkParse(b *testing.B) {
	one, price := int64(1), int64(1999)
	exp := time.UnixMilli(1700000060000).UTC()
	data, _ := json.Marshal(Event{EventID: "a/1700000000000-3", Type: OrderReserved, At: time.UnixMilli(1700000000123).UTC(),
		ItemID: "a", OrderID: "a.7", UserID: "u12345", Quantity: &one, PriceCents: &price, ExpiresAt: &exp})
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Parse(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e, err := viaJSON(data)
			if err == nil {
				err = e.Validate()
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
