package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// importFixture is a CSV file of a few thousand rows mixing good rows, rows the parser refuses,
// second rows of an item and rows of items that exist, with what its first import must do.
type importFixture struct {
	csv              string
	created, updated int
	items            map[string]importedItem // every item after the import, by id
	saves            map[string]int          // the rows of the file that save each item
	errors           []int                   // the lines of the errors, in order
	message          map[int]string          // a part of each error's message, by line
}

type importedItem struct {
	name, category    string
	price, stock, lim int64
}

// newImportFixture builds a file of n rows. Before it is imported, "it5" exists with the file's
// stock (its row updates it) and "it7" with stock 99 (its row's stock 10 is refused).
func newImportFixture(n int) importFixture {
	f := importFixture{items: map[string]importedItem{}, saves: map[string]int{}, message: map[int]string{}}
	f.items["it7"] = importedItem{"Kept", "old", 500, 99, 1}
	exists := map[string]bool{"it5": true, "it7": true}
	var b strings.Builder
	b.WriteString("id,name,category,price_cents,stock,per_user_limit,starts_at,ends_at\n")
	bad := []struct{ row, message string }{
		{"bad id,Bad,c,1,1,1,,", "id must match"},
		{"itX,Bad,c,abc,1,1,,", "price_cents must be an integer"},
		{"itX,Bad,c,1,1,0,,", "per_user_limit must be at least 1"},
		{"itX,Bad,c,1,1", "want 8 fields, got 5"},
		{"itX,\"Bad\x00\",c,1,1,1,,", "control characters"},
		{"itX,Bad,c,1,1,1,2027-01-01T00:00:00Z,2026-01-01T00:00:00Z", "ends_at must be after starts_at"},
	}
	for i := range n {
		line := i + 2 // the header is line 1
		if i%50 == 13 {
			e := bad[(i/50)%len(bad)]
			b.WriteString(e.row + "\n")
			f.errors = append(f.errors, line)
			f.message[line] = e.message
			continue
		}
		id := fmt.Sprintf("it%d", i)
		if i%500 == 250 {
			id = fmt.Sprintf("it%d", i-100) // a second row of an item: the later row wins
		}
		it := importedItem{fmt.Sprintf("Item %d", i), fmt.Sprintf("cat%d", i%4), int64(100 + i), 10, int64(1 + i%5)}
		fmt.Fprintf(&b, "%s,%s,%s,%d,%d,%d,,\n", id, it.name, it.category, it.price, it.stock, it.lim)
		switch {
		case id == "it7":
			f.errors = append(f.errors, line)
			f.message[line] = "stock differs from the current total 99"
			continue
		case exists[id]:
			f.updated++
		default:
			f.created++
		}
		exists[id] = true
		f.items[id] = it
		f.saves[id]++
	}
	f.csv = b.String()
	return f
}

// TestImportLargeFile imports a few thousand rows, good and bad, then the same file again: the
// reply counts and reports per line as row-by-row saving would, every item is in Redis with
// one outbox event per saved row, GET /api/items shows the import at once (the snapshot takes
// it in one step: one new generation per import, not one per row), and the re-import updates.
func TestImportLargeFile(t *testing.T) {
	a := newTestAPI(t, func(cfg *config.Config) {
		cfg.SnapshotInterval = time.Hour // only this instance's own writes move its snapshot
	})
	ctx := context.Background()
	f := newImportFixture(3000)
	for id, stock := range map[string]int64{"it5": 10, "it7": 99} {
		if r := a.do("PUT", "/api/admin/items/"+id, testAdminToken, map[string]any{
			"name": "Kept", "category": "old", "price_cents": 500, "stock": stock, "per_user_limit": 1,
		}); r.Status != http.StatusCreated {
			t.Fatalf("PUT %s: %d %s", id, r.Status, r.Raw)
		}
	}
	tag := a.do("GET", "/api/items", "", nil).Header.Get("ETag")
	saved := 0
	for _, n := range f.saves {
		saved += n
	}
	for round, want := range []struct{ created, updated int }{{f.created, f.updated}, {0, saved}} {
		_, gen, err := a.inv.Catalogue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r := a.do("POST", "/api/admin/items/import", testAdminToken, f.csv, "Content-Type", "text/csv")
		if r.Status != http.StatusOK || r.Body["created"] != float64(want.created) ||
			r.Body["updated"] != float64(want.updated) || r.Body["failed"] != float64(len(f.errors)) {
			t.Fatalf("round %d: import: %d %.300s; want created %d, updated %d, failed %d",
				round, r.Status, r.Raw, want.created, want.updated, len(f.errors))
		}
		var lines []int
		for _, e := range r.Body["errors"].([]any) {
			e := e.(map[string]any)
			line := int(e["line"].(float64))
			lines = append(lines, line)
			if msg := e["message"].(string); !strings.Contains(msg, f.message[line]) {
				t.Errorf("round %d: line %d: message %q, want one saying %q", round, line, msg, f.message[line])
			}
		}
		if !slices.Equal(lines, f.errors) {
			t.Fatalf("round %d: error lines %v, want %v", round, lines, f.errors)
		}
		if _, now, _ := a.inv.Catalogue(ctx); now != gen+1 {
			t.Errorf("round %d: the import moved the snapshot %d generations, want 1 (one copy per import)", round, now-gen)
		}

		// GET /api/items, at once: every item as imported.
		list := a.do("GET", "/api/items", "", nil, "If-None-Match", tag)
		if round == 0 && (list.Status != http.StatusOK || list.Header.Get("ETag") == tag) {
			t.Fatalf("after the import, the old ETag still matches: %d", list.Status)
		}
		tag = list.Header.Get("ETag")
		list = a.do("GET", "/api/items", "", nil)
		got := map[string]importedItem{}
		for _, v := range list.Body["items"].([]any) {
			it := v.(map[string]any)
			got[it["id"].(string)] = importedItem{it["name"].(string), it["category"].(string),
				int64(it["price_cents"].(float64)), int64(it["stock_total"].(float64)), int64(it["per_user_limit"].(float64))}
		}
		if len(got) != len(f.items) {
			t.Fatalf("round %d: GET /api/items lists %d items, want %d", round, len(got), len(f.items))
		}
		for id, want := range f.items {
			if got[id] != want {
				t.Fatalf("round %d: GET /api/items: %s is %+v, want %+v", round, id, got[id], want)
			}
		}

		// Redis: every item as imported, changed once per saved row, with an event for each.
		events := testenv.OutboxEvents(t, a.rdb, a.keys, "item.upserted")
		for id, want := range f.items {
			it, err := a.inv.Get(ctx, id)
			if err != nil {
				t.Fatalf("round %d: %s: %v", round, id, err)
			}
			if got := (importedItem{it.Name, it.Category, it.PriceCents, it.StockTotal, it.PerUserLimit}); got != want {
				t.Fatalf("round %d: %s in Redis is %+v, want %+v", round, id, got, want)
			}
			saves := (round + 1) * f.saves[id]
			if id == "it5" || id == "it7" {
				saves++ // the PUT
			}
			if it.Version != int64(saves) || events[id] != saves {
				t.Fatalf("round %d: %s: version %d and %d item.upserted events, want %d saves",
					round, id, it.Version, events[id], saves)
			}
		}
		if n := a.rdb.SCard(ctx, a.keys.Catalog()).Val(); n != int64(len(f.items)) {
			t.Fatalf("round %d: the catalogue set holds %d ids, want %d", round, n, len(f.items))
		}
	}
}

// A Redis failure during an import (one item's key holds a string: WRONGTYPE) fails the
// request with 503 unavailable, as it did row by row, and GET /api/items shows exactly the
// items Redis holds.
func TestImportRedisFailure(t *testing.T) {
	a := newTestAPI(t, func(cfg *config.Config) { cfg.SnapshotInterval = time.Hour })
	ctx := context.Background()
	a.do("GET", "/api/items", "", nil)
	if err := a.rdb.Set(ctx, a.keys.Item("it700").Hash(), "junk", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := a.do("POST", "/api/admin/items/import", testAdminToken, importCSV(1000, "5"), "Content-Type", "text/csv")
	if r.Status != http.StatusServiceUnavailable || r.code() != "unavailable" {
		t.Fatalf("import over a broken item: %d %s", r.Status, r.Raw)
	}
	listed := 0
	for _, v := range a.do("GET", "/api/items", "", nil).Body["items"].([]any) {
		id := v.(map[string]any)["id"].(string)
		if _, err := a.inv.Get(ctx, id); err != nil {
			t.Fatalf("GET /api/items lists %s, Redis: %v", id, err)
		}
		listed++
	}
	if n := a.rdb.Exists(ctx, a.keys.Item("it0").Hash(), a.keys.Item("it699").Hash()).Val(); listed == 0 || n != 2 {
		t.Fatalf("%d items listed, it0 and it699 in Redis: %d of 2", listed, n)
	}
	for i := range 1000 {
		id := fmt.Sprintf("it%d", i)
		if _, err := a.inv.Get(ctx, id); err == nil {
			if r := a.do("GET", "/api/items/"+id, "", nil); r.Status != http.StatusOK {
				t.Fatalf("%s is in Redis, GET /api/items/%s: %d", id, id, r.Status)
			}
		}
	}
}

// An import's reply stays small whatever the file: `errors` lists the first 1,000
// bad rows in file order and `failed` counts them all, and the good rows among them load. The
// file here is a JSON array just under the 8 MiB limit, almost all of it bad rows. (Before,
// every bad row was in the reply, and the whole file's rows were in memory at once.)
func TestImportReplyBounded(t *testing.T) {
	a := newTestAPI(t, nil)
	var b strings.Builder
	b.WriteString("[")
	bad, good := 0, 0
	var goodLines []int
	pad := strings.Repeat("n", 400)
	for i := 0; b.Len() < 8<<20-600; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		if i%2000 == 7 {
			fmt.Fprintf(&b, `{"id":"good%d","name":"Good","category":"c","price_cents":1,"stock":1,"per_user_limit":1}`, i)
			good++
			goodLines = append(goodLines, i+1)
			continue
		}
		fmt.Fprintf(&b, `{"id":"bad id %d","name":"%s"}`, i, pad) // rows of ~420 bytes: ~20,000 of them
		bad++
	}
	b.WriteString("]")
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := a.do("POST", "/api/admin/items/import", testAdminToken, b.String())
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("an %.1f MiB import of %d rows: reply %d bytes; allocated %.0f MiB in all during it",
		float64(b.Len())/(1<<20), bad+good, len(r.Raw), float64(after.TotalAlloc-before.TotalAlloc)/(1<<20))
	if r.Status != http.StatusOK || r.Body["created"] != float64(good) || r.Body["failed"] != float64(bad) {
		t.Fatalf("import: %d %.300s; want created %d, failed %d", r.Status, r.Raw, good, bad)
	}
	errs := r.Body["errors"].([]any)
	if len(errs) != 1000 {
		t.Fatalf("errors lists %d rows, want the first 1,000", len(errs))
	}
	// The first 1,000 bad rows, in file order: positions 1..1001 without the good row at 8.
	want := 1
	for _, e := range errs {
		if want == 8 {
			want++
		}
		if line := int(e.(map[string]any)["line"].(float64)); line != want {
			t.Fatalf("errors: line %d where %d was expected", line, want)
		}
		want++
	}
	if len(r.Raw) > 256<<10 {
		t.Fatalf("the reply is %d bytes; want it small whatever the file", len(r.Raw))
	}
	for _, line := range goodLines {
		if g := a.do("GET", fmt.Sprintf("/api/items/good%d", line-1), "", nil); g.Status != http.StatusOK {
			t.Fatalf("good row at %d not loaded: %d", line, g.Status)
		}
	}
}
