package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/inventory"
)

// The encoded catalogue is exactly encoding/json's bytes for {"items": [...]} and each
// {"item": ...}, generation after generation: items changed, added and removed, statuses moved
// by time alone. Items that encode as before keep their bytes (the same slice: not marshalled
// again).
func TestEncodeCatalogueIsEncodingJSON(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	snap := map[string]inventory.Item{}
	for i := range 40 {
		it := inventory.Item{ID: fmt.Sprintf("i%02d", i), Name: fmt.Sprintf("Item <%d> & \"more\" é", i), Category: []string{"a", "b"}[i%2],
			PriceCents: int64(100 + i), StockTotal: 10, StockLeft: int64(i % 4), PerUserLimit: 2, Version: 1}
		switch i % 5 {
		case 1:
			it.StartsAt = at(time.Minute) // upcoming until t0+1m
		case 2:
			it.EndsAt = at(-time.Minute) // ended
		case 3:
			it.StartsAt, it.EndsAt = at(-time.Hour), at(2*time.Minute)
			it.Queue = &inventory.QueueSettings{AdmitPerSecond: 5, MaxActive: 10, PassTTLSeconds: 60}
		}
		snap[it.ID] = it
	}
	check := func(e *encodedCatalogue, snap map[string]inventory.Item, now time.Time) {
		t.Helper()
		var items []inventory.Item
		for _, it := range snap {
			it.Status = it.StatusAt(now)
			items = append(items, it)
			one, _ := json.Marshal(gin.H{"item": it})
			if string(e.one[it.ID]) != string(one) {
				t.Fatalf("%s: %s, encoding/json: %s", it.ID, e.one[it.ID], one)
			}
		}
		slices.SortFunc(items, func(a, b inventory.Item) int { return strings.Compare(a.ID, b.ID) })
		if items == nil {
			items = []inventory.Item{}
		}
		list, _ := json.Marshal(gin.H{"items": items})
		if string(e.list) != string(list) {
			t.Fatalf("list differs from encoding/json:\n%s\n%s", e.list, list)
		}
		if len(e.ids) != len(snap) || !slices.IsSorted(e.ids) {
			t.Fatalf("ids %v", e.ids)
		}
	}
	reused := func(prev, e *encodedCatalogue, id string) bool {
		a, b := prev.one[id], e.one[id]
		return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
	}

	e, err := encodeCatalogue(snap, 1, t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	check(e, snap, t0)

	// Generation 2: two items changed (stock, name), one added, one removed.
	next := maps(snap)
	it := next["i04"]
	it.StockLeft, it.Version = 3, 2 // was 0: sold out, now live
	next["i04"] = it
	it = next["i08"]
	it.Name, it.Version = "renamed", 2
	next["i08"] = it
	next["i99"] = inventory.Item{ID: "i99", Name: "new", Category: "a", PriceCents: 1, StockTotal: 1, StockLeft: 1, PerUserLimit: 1}
	delete(next, "i10")
	e2, err := encodeCatalogue(next, 2, t0, e)
	if err != nil {
		t.Fatal(err)
	}
	check(e2, next, t0)
	if reused(e, e2, "i04") || reused(e, e2, "i08") || !reused(e, e2, "i00") || !reused(e, e2, "i11") {
		t.Fatal("changed items must be encoded again, unchanged ones reused")
	}

	// Generation 3: nothing changed but the time: upcoming items went live, live ones ended.
	later := t0.Add(3 * time.Minute)
	e3, err := encodeCatalogue(next, 3, later, e2)
	if err != nil {
		t.Fatal(err)
	}
	check(e3, next, later)
	if reused(e2, e3, "i01") || reused(e2, e3, "i03") || !reused(e2, e3, "i00") {
		t.Fatal("items whose status moved with time must be encoded again, the others reused")
	}
	if &e3.ids[0] != &e2.ids[0] {
		t.Fatal("the same items: the sorted ids should be reused")
	}

	// An empty catalogue.
	e4, err := encodeCatalogue(map[string]inventory.Item{}, 4, later, e3)
	if err != nil {
		t.Fatal(err)
	}
	check(e4, map[string]inventory.Item{}, later)
}

func maps(m map[string]inventory.Item) map[string]inventory.Item {
	out := make(map[string]inventory.Item, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// sameEncoding must tell apart two items that differ in any field the JSON shows, and only
// those: a field added to inventory.Item without it would let a stale encoding be reused.
func TestSameEncodingCoversEveryField(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	base := inventory.Item{ID: "a", Name: "n", Category: "c", PriceCents: 1, StockTotal: 2, StockLeft: 1, PerUserLimit: 1,
		StartsAt: &t0, EndsAt: &t0, Status: "live", Queue: &inventory.QueueSettings{AdmitPerSecond: 1, MaxActive: 1, PassTTLSeconds: 1},
		ImageURL: new("https://img.example/a.png"), Reserved: 1, Paid: 1, Version: 1}
	if !sameEncoding(base, base) {
		t.Fatal("an item differs from itself")
	}
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		f := typ.Field(i)
		changed := base
		v := reflect.ValueOf(&changed).Elem().Field(i)
		switch f.Type {
		case reflect.TypeOf(""):
			v.SetString(v.String() + "x")
		case reflect.TypeOf(int64(0)):
			v.SetInt(v.Int() + 1)
		case reflect.TypeOf(&t0):
			later := t0.Add(time.Second)
			v.Set(reflect.ValueOf(&later))
		case reflect.TypeOf(base.ImageURL):
			v.Set(reflect.ValueOf(new(*base.ImageURL + "x")))
		case reflect.TypeOf(base.Queue):
			q := *base.Queue
			q.MaxActive++
			v.Set(reflect.ValueOf(&q))
		default:
			t.Fatalf("field %s of type %s: teach this test (and sameEncoding) about it", f.Name, f.Type)
		}
		shown := f.Tag.Get("json") != "-"
		if got := !sameEncoding(base, changed); got != shown {
			t.Errorf("field %s changed: sameEncoding says differ=%v, want %v", f.Name, got, shown)
		}
	}
	// Equal values behind different pointers encode the same.
	copyTime, copyQueue := t0, *base.Queue
	other := base
	other.StartsAt, other.Queue = &copyTime, &copyQueue
	if !sameEncoding(base, other) {
		t.Error("equal times and waiting rooms behind other pointers must count as the same")
	}
}

// The pages a generation keeps are bounded in bytes, not only in number: any valid id is a
// cursor, so a client asking ?limit=1000 with ever new cursors would otherwise make one
// generation hold maxCachedPages pages of 1,000 items each (~1-2 GB). Past the bound a page is
// still answered, only not kept.
func TestCachedPagesAreBoundedInBytes(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	snap := map[string]inventory.Item{}
	for i := range 1100 {
		id := fmt.Sprintf("i%04d", i)
		snap[id] = inventory.Item{ID: id, Name: strings.Repeat("n", 200), Category: "c", PriceCents: 1,
			StockTotal: 1, StockLeft: 1, PerUserLimit: 1}
	}
	e, err := encodeCatalogue(snap, 1, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	const bound = maxCachedPageBytes
	for i := range 150 {
		q := pageQuery{limit: 1000, cursor: fmt.Sprintf("i%04d", i)}
		if got := e.page(q).plain; len(got) < 1000*200 || !strings.HasPrefix(string(got), `{"items":[`) {
			t.Fatalf("page %v: %d bytes", q, len(got))
		}
	}
	var kept int
	e.pages.Range(func(_, v any) bool { kept += len(v.(*listBody).plain); return true })
	if kept > bound {
		t.Fatalf("one generation keeps %d MiB of pages, over %d MiB", kept>>20, bound>>20)
	}
}

// readPageQuery parses the query by hand (no url.Values map per request); it must read every
// query as url.Values would: the first of a repeated parameter, escapes and '+' decoded, pairs
// that do not unescape (or hold ';') left out, any other name refused.
func TestReadPageQueryMatchesURLValues(t *testing.T) {
	reference := func(raw string) (pageQuery, bool) {
		values, _ := url.ParseQuery(raw)
		for k := range values {
			if k != "limit" && k != "cursor" && k != "category" {
				return pageQuery{}, false
			}
		}
		c := &gin.Context{Request: httptest.NewRequest("GET", "/api/items", nil)}
		c.Request.URL.RawQuery = url.Values{"limit": {values.Get("limit")}, "cursor": {values.Get("cursor")},
			"category": {values.Get("category")}}.Encode()
		q, err := readPageQuery(c)
		return q, err == nil
	}
	for _, raw := range []string{
		"", "limit=5", "limit=5&limit=7", "limit=%35", "cursor=a1&limit=2", "category=ev%65n", "category=a+b",
		"category=%zz&limit=3", "limit=3;x=1", "limit=3&&cursor=b", "&", "=", "limit", "limit=", "sort=id",
		"limit=5&sort=id", "Limit=5", "category=%E2%82%AC", "cursor=a.b", "limit=1001", "limit=x", "%zz=1&limit=2",
	} {
		c := &gin.Context{Request: httptest.NewRequest("GET", "/api/items", nil)}
		c.Request.URL.RawQuery = raw
		got, err := readPageQuery(c)
		want, ok := reference(raw)
		if (err == nil) != ok || (ok && got != want) {
			t.Errorf("?%s: %+v, %v; url.Values reads %+v, ok %v", raw, got, err, want, ok)
		}
	}
}
