package events

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

// TestAppendJSONIsMarshal: the relay's encoder gives json.Marshal's bytes for every shape of
// event: each optional field present or not, strings that need escaping, times with and
// without fractions or zones, and the times encoding/json refuses.
func TestAppendJSONIsMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "a", "item-01", `quo"te`, `back\slash`, "<b>&amp;", "tab\there", "é ü 😀", "\u2028x\u2029", "bad\xffutf8", "nul\x00"}
	num := func() *int64 {
		if r.IntN(3) == 0 {
			return nil
		}
		n := r.Int64N(1e12) - 5
		return &n
	}
	zones := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+30*60), time.FixedZone("y", -7), time.FixedZone("z", 30*3600)}
	tm := func() time.Time {
		t := time.UnixMilli(r.Int64N(4e12)).In(zones[r.IntN(len(zones))])
		if r.IntN(4) == 0 {
			t = t.Add(time.Duration(r.IntN(1e9)))
		}
		if r.IntN(20) == 0 {
			t = time.Date(10000+r.IntN(10), 1, 1, 0, 0, 0, 0, time.UTC)
		}
		return t
	}
	optTime := func() *time.Time {
		if r.IntN(2) == 0 {
			return nil
		}
		t := tm()
		return &t
	}
	str := func() string { return strs[r.IntN(len(strs))] }
	for i := range 5000 {
		e := Event{EventID: str(), Type: str(), At: tm(), ItemID: str(), OrderID: str(), UserID: str(),
			Quantity: num(), PriceCents: num(), Stars: num(), Delta: num(), Name: str(), Category: str(),
			StockTotal: num(), PerUserLimit: num(), StartsAt: optTime(), EndsAt: optTime(), ExpiresAt: optTime()}
		if i == 0 {
			e = Event{}
		}
		want, werr := json.Marshal(e)
		got, gerr := e.AppendJSON([]byte("prefix"))
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("event %+v: json.Marshal error %v, AppendJSON error %v", e, werr, gerr)
		}
		if werr == nil && string(got) != "prefix"+string(want) {
			t.Fatalf("event %+v:\n got %s\nwant prefix%s", e, got, want)
		}
	}
}

// TestCompactReservation: purchase.lua's compact order.reserved entry gives the same event as
// the flat entry reconcile/reemit.lua writes for the same order.
func TestCompactReservation(t *testing.T) {
	flat, err := FromEntry("a/1700000000000-3", map[string]any{"type": "order.reserved", "at": "1700000000123",
		"item": "a", "order": "a.7", "user": "u", "quantity": "2", "price_cents": "150", "expires": "1700000600123"})
	if err != nil {
		t.Fatal(err)
	}
	compact, err := FromEntry("a/1700000000000-3", map[string]any{"type": "order.reserved", "order": "a.7",
		"o": "u|2|150|reserved|1700000000123|1700000600123"})
	if err != nil {
		t.Fatal(err)
	}
	fj, _ := json.Marshal(flat)
	cj, _ := json.Marshal(compact)
	if string(fj) != string(cj) {
		t.Fatalf("compact entry gives %s, flat %s", cj, fj)
	}
	if item := EntryItem(map[string]any{"type": "order.reserved", "order": "a.7", "o": "x"}); item != "a" {
		t.Fatalf("item of a compact entry: %q", item)
	}
	for _, bad := range []map[string]any{
		{"type": "order.reserved", "order": "a.7", "o": "u|2|150|reserved|1700000000123"},
		{"type": "order.reserved", "order": "a.7", "o": "u|two|150|reserved|1700000000123|1"},
		{"type": "order.reserved", "order": "b7", "o": "u|2|150|reserved|1700000000123|1"},
		{"type": "order.reserved", "order": "a.7", "o": "|2|150|reserved|1700000000123|1"},
	} {
		if _, err := FromEntry("a/1-0", bad); err == nil {
			t.Errorf("malformed compact entry %v accepted", bad)
		}
	}
}

// TestBatchEntry: purchase.lua's batch entry gives one order.reserved event per order, each the
// event the flat entry of the same order gives, with its own event id (OrderEventID) whose
// Position is the entry's; a malformed batch gives no event.
func TestBatchEntry(t *testing.T) {
	batch := map[string]any{"type": "order.reserved", "item": "a", "seq": "7", "p": "150",
		"c": "1700000000123", "e": "1700000600123", "b": "u|2|v|1"}
	evs, err := EntryEvents("1700000000125-3", batch)
	if err != nil || len(evs) != 2 {
		t.Fatalf("batch entry: %v %v, want 2 events", evs, err)
	}
	for i, want := range []struct{ order, user, qty string }{{"a.7", "u", "2"}, {"a.8", "v", "1"}} {
		flat, err := FromEntry(OrderEventID(want.order, "1700000000125-3"), map[string]any{"type": "order.reserved",
			"at": "1700000000123", "item": "a", "order": want.order, "user": want.user, "quantity": want.qty,
			"price_cents": "150", "expires": "1700000600123"})
		if err != nil {
			t.Fatal(err)
		}
		fj, _ := json.Marshal(flat)
		bj, _ := json.Marshal(evs[i])
		if string(fj) != string(bj) {
			t.Errorf("order %d of the batch: %s, want %s", i, bj, fj)
		}
		if pos, err := evs[i].Position(); err != nil || pos != (Position{1700000000125, 3}) {
			t.Errorf("position of %s: %v %v", evs[i].EventID, pos, err)
		}
	}
	if evs[0].EventID != "a.7/1700000000125-3" {
		t.Errorf("event id %q", evs[0].EventID)
	}
	if item := EntryItem(batch); item != "a" {
		t.Errorf("item of a batch entry: %q", item)
	}
	for _, change := range []map[string]any{
		{"b": "u|2|v"}, {"b": "u|two"}, {"b": "|2"}, {"b": "u|0"}, {"b": ""}, {"seq": "0"}, {"seq": "x"},
		{"item": "a.b"}, {"p": "-1"}, {"c": "0"}, {"c": "x"},
	} {
		bad := map[string]any{}
		for k, v := range batch {
			bad[k] = v
		}
		for k, v := range change {
			bad[k] = v
		}
		if evs, err := EntryEvents("1-0", bad); err == nil {
			t.Errorf("malformed batch %v accepted: %v", change, evs)
		}
	}
}
