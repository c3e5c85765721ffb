package httpapi

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/orders"
)

// The hand-written replies must be byte for byte what encoding/json writes for the same values.
func TestHandWrittenJSONMatchesEncodingJSON(t *testing.T) {
	orderCases := []orders.Order{
		{ID: "phone.1", ItemID: "phone", UserID: "alice", Quantity: 1, PriceCents: 99900, Status: orders.Reserved,
			CreatedAt: time.UnixMilli(1763776800123).UTC(), ExpiresAt: time.UnixMilli(1763777400000).UTC()},
		{ID: "x.42", ItemID: "x", UserID: "u_-9", Quantity: 1000000000, PriceCents: 0, Status: orders.Paid,
			CreatedAt: time.UnixMilli(0).UTC(), ExpiresAt: time.UnixMilli(1).UTC()},
		{ID: "a<b>&\"c\\", ItemID: "é", UserID: "\u2028\x01", Status: "odd"},
	}
	for _, o := range orderCases {
		want, _ := json.Marshal(gin.H{"order": o})
		got := append(appendOrder([]byte(`{"order":`), o), '}')
		if string(got) != string(want) {
			t.Errorf("order %q:\n got %s\nwant %s", o.ID, got, want)
		}
	}
}

func TestQuickQuantity(t *testing.T) {
	for _, c := range []struct {
		body string
		qty  int64
		ok   bool
	}{
		{"", 1, true},
		{"{}", 1, true},
		{` { } `, 1, true},
		{`{"quantity":2}`, 2, true},
		{"{ \"quantity\" :\t17 }\n", 17, true},
		{`{"quantity":0}`, 0, true}, // then refused as out of range by the handler
		{`{"quantity":1000000000}`, 1000000000, true},
		// Everything else is left to the strict decoder (which refuses or accepts it).
		{" ", 0, false},
		{`{"quantity":-1}`, 0, false},
		{`{"quantity":01}`, 0, false},
		{`{"quantity":1.5}`, 0, false},
		{`{"quantity":12345678901}`, 0, false},
		{`{"quantity":"2"}`, 0, false},
		{`{"quantity":2,"x":1}`, 0, false},
		{`{"quantity":2}{}`, 0, false},
		{`{"Quantity":2}`, 0, false},
		{`null`, 0, false},
		{`{"quantity":null}`, 0, false},
	} {
		qty, ok := quickQuantity([]byte(c.body))
		if ok != c.ok || (ok && qty != c.qty) {
			t.Errorf("quickQuantity(%q) = %d, %v; want %d, %v", c.body, qty, ok, c.qty, c.ok)
		}
	}
}
