package httpapi

import (
	"encoding/json"
	"fmt"
	"reflect"
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

// BenchmarkStrictUnmarshal: the strict decode of bodies that miss quickQuantity's short cut (a
// purchase body of another shape) and of a full item body (PUT, one JSON import row).
// Run: go test -run='^$' -bench=StrictUnmarshal ./internal/httpapi/
func BenchmarkStrictUnmarshal(b *testing.B) {
	purchase := []byte(`{"quantity": 10000000000}`)
	item := []byte(`{"id":"tv","name":"Big TV","category":"screens","price_cents":45000,"stock":5,"per_user_limit":2,` +
		`"starts_at":"2026-01-01T00:00:00Z","ends_at":"2027-01-01T00:00:00Z","queue":{"admit_per_second":50,"max_active":200,"pass_ttl_seconds":120}}`)
	b.Run("purchase", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var body struct {
				Quantity *int64 `json:"quantity"`
			}
			if err := strictUnmarshal(purchase, &body); err != nil || *body.Quantity != 1e10 {
				b.Fatal(err)
			}
		}
	})
	b.Run("item", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var body itemBody
			if err := strictUnmarshal(item, &body); err != nil || body.Queue.MaxActive != 200 {
				b.Fatal(err)
			}
		}
	})
}

// strictUnmarshal takes JSON names exactly as the struct's tags spell them, nested ones too;
// encoding/json alone matches them case-insensitively.
func TestStrictUnmarshalNames(t *testing.T) {
	for _, c := range []struct {
		body string
		ok   bool
	}{
		{`{"name":"X","queue":{"admit_per_second":1,"max_active":2,"pass_ttl_seconds":3}}`, true},
		{`{"name":"X","queue":null}`, true},
		{` { "qu\u0065ue" : { "max_active" : 2 } , "name" : "a\"}b" } `, true}, // an escaped name is the same name
		{`{"name":"[{\"}","category":"]},\\"}`, true},                          // brackets, quotes and backslashes in strings
		{`{}`, true},
		{`{"Name":"X"}`, false},
		{`{"NAME":"X"}`, false},
		{`{"name":"X","price_Cents":1}`, false},
		{`{"name":"X","Queue":{"admit_per_second":1}}`, false},
		{`{"queue":{"admit_per_second":1,"Max_Active":2}}`, false},
		{`{"queue":{"max_\u0041ctive":2}}`, false}, // escapes are read: this is Max "A"ctive
		{`{"name":"X","name":"Y","Name":"Z"}`, false},
		{`{"name":"X","name":"Y"}`, false}, // a name twice: encoding/json would keep "Y"
		{`{"name":"X","n\u0061me":"Y"}`, false},
		{`{"queue":{"max_active":2,"max_active":3}}`, false},
		{`{"name":"X","queue":{"max_active":2},"category":"c"}`, true}, // nested names are their own
	} {
		var body itemBody
		err := strictUnmarshal([]byte(c.body), &body)
		if (err == nil) != c.ok {
			t.Errorf("strictUnmarshal(%s) = %v, want ok %v", c.body, err, c.ok)
		}
	}
}

// TestStrictUnmarshalDuplicatesInLargeObjects: duplicates are found past the short list of
// names too, in objects whose names are not otherwise checked.
func TestStrictUnmarshalDuplicatesInLargeObjects(t *testing.T) {
	obj := func(dup bool) []byte {
		b := []byte("{")
		for i := range 100 {
			b = fmt.Appendf(b, `"k%d":%d,`, i, i)
		}
		if dup {
			b = append(b, `"k42":0,`...)
		}
		return append(b, `"end":0}`...)
	}
	var m map[string]int
	if err := strictUnmarshal(obj(false), &m); err != nil || len(m) != 101 {
		t.Fatalf("100 distinct names: %v (%d)", err, len(m))
	}
	if err := strictUnmarshal(obj(true), &m); err == nil {
		t.Fatal("a name repeated after 100 others was accepted")
	}
}

// FuzzStrictUnmarshal: the name check never panics, and what strictUnmarshal accepts holds
// only the struct's exact names.
func FuzzStrictUnmarshal(f *testing.F) {
	for _, s := range []string{`{"name":"X","queue":{"max_active":2}}`, `{"Name":1}`, `null`, `{"queue":[{"a":"\""}]}`, ` {} `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var body itemBody
		if strictUnmarshal(b, &body) != nil {
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(b, &m) != nil {
			return // null
		}
		names := jsonNamesOf(reflect.TypeOf(body))
		for k, v := range m {
			if _, ok := names[k]; !ok {
				t.Fatalf("accepted %q with the name %q", b, k)
			}
			var q map[string]json.RawMessage
			if k == "queue" && json.Unmarshal(v, &q) == nil {
				for k := range q {
					if _, ok := names["queue"][k]; !ok {
						t.Fatalf("accepted %q with the queue name %q", b, k)
					}
				}
			}
		}
	})
}
