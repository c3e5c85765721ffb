package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/testing/options"
)

// ratingAPI is the shared harness with ranking and the rate limiter, driven with raw JSON
// bodies as a named user.
type ratingAPI struct{ *testAPI }

func newRatingAPI(t *testing.T, size int) *ratingAPI {
	t.Helper()
	return &ratingAPI{newRankedAPI(t, func(cfg *config.Config) {
		cfg.LeaderboardSize = size
		cfg.LimitRating = config.Limit{Rate: 1000, Period: 1e9, Burst: 1000}
	})}
}

// do sends a request as user ("" = none, "admin" = the admin token) and decodes the JSON body.
func (a *ratingAPI) do(method, path, user, body string) (int, map[string]any) {
	a.t.Helper()
	token := ""
	switch user {
	case "":
	case "admin":
		token = testAdminToken
	default:
		token = a.token(user)
	}
	r := a.testAPI.do(method, path, token, body)
	if !json.Valid([]byte(r.Raw)) {
		a.t.Fatalf("%s %s: body %q is not JSON", method, path, r.Raw)
	}
	return r.Status, r.Body
}

func (a *ratingAPI) item(id, name, category string) {
	a.t.Helper()
	body := fmt.Sprintf(`{"name":%q,"category":%q,"price_cents":100,"stock":1000,"per_user_limit":100}`, name, category)
	if code, out := a.do(http.MethodPut, "/api/admin/items/"+id, "admin", body); code != http.StatusCreated {
		a.t.Fatalf("create %s: %d %v", id, code, out)
	}
}

// buyer records a paid order directly (as the pay script would).
func (a *ratingAPI) buyer(item, user string) {
	a.t.Helper()
	if err := a.rdb.HSet(context.Background(), a.keys.Item(item).PaidBy(), user, 1).Err(); err != nil {
		a.t.Fatal(err)
	}
}

func errCode(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func entries(t *testing.T, out map[string]any) []map[string]any {
	t.Helper()
	raw, ok := out["entries"].([]any)
	if !ok {
		t.Fatalf("no entries in %v", out)
	}
	es := make([]map[string]any, len(raw))
	for i, r := range raw {
		es[i] = r.(map[string]any)
	}
	return es
}

// The whole path: purchase, pay (the hook feeds best sellers), rate, read both boards.
func TestRatingFlow(t *testing.T) {
	a := newRatingAPI(t, 100)
	a.item("phone1", "Phone One", "phones")
	a.item("phone2", "Phone Two", "phones")
	a.item("book1", "Book One", "books")

	code, out := a.do(http.MethodPost, "/api/items/phone1/purchase", "alice", `{"quantity":3}`)
	if code != http.StatusCreated {
		t.Fatalf("purchase: %d %v", code, out)
	}
	oid := out["order"].(map[string]any)["id"].(string)
	if code, out := a.do(http.MethodPost, "/api/items/phone1/rating", "alice", `{"stars":5}`); code != http.StatusConflict || errCode(out) != "not_a_buyer" {
		t.Fatalf("rating before paying: %d %v", code, out)
	}
	if code, out := a.do(http.MethodPost, "/api/orders/"+oid+"/pay", "alice", ``); code != http.StatusOK {
		t.Fatalf("pay: %d %v", code, out)
	}
	code, out = a.do(http.MethodPost, "/api/items/phone1/rating", "alice", `{"stars":5}`)
	if code != http.StatusOK || out["item_id"] != "phone1" || out["average"] != 5.0 || out["count"] != 1.0 {
		t.Fatalf("rating: %d %v", code, out)
	}
	a.buyer("phone1", "bob")
	code, out = a.do(http.MethodPost, "/api/items/phone1/rating", "bob", `{"stars":4}`)
	if code != http.StatusOK || out["average"] != 4.5 || out["count"] != 2.0 {
		t.Fatalf("second rating: %d %v", code, out)
	}
	code, out = a.do(http.MethodPost, "/api/items/phone1/rating", "bob", `{"stars":2}`) // replaces
	if code != http.StatusOK || out["average"] != 3.5 || out["count"] != 2.0 {
		t.Fatalf("re-rating: %d %v", code, out)
	}
	a.buyer("phone2", "carol")
	a.do(http.MethodPost, "/api/items/phone2/rating", "carol", `{"stars":1}`)
	a.buyer("book1", "carol")
	a.do(http.MethodPost, "/api/items/book1/rating", "carol", `{"stars":4}`)

	code, out = a.do(http.MethodGet, "/api/leaderboards/top-rated", "", "")
	if code != http.StatusOK || out["board"] != "top-rated" {
		t.Fatalf("top-rated: %d %v", code, out)
	}
	es := entries(t, out)
	// (35+7)/12 = 3.5, (35+4)/11 = 3.545..., (35+1)/11 = 3.27...
	want := []struct{ id, name string }{{"book1", "Book One"}, {"phone1", "Phone One"}, {"phone2", "Phone Two"}}
	if len(es) != len(want) {
		t.Fatalf("entries %v", es)
	}
	for i, w := range want {
		if es[i]["rank"] != float64(i+1) || es[i]["item_id"] != w.id || es[i]["name"] != w.name {
			t.Fatalf("entry %d: %v, want %v", i, es[i], w)
		}
	}
	if es[1]["score"] != 3.5 {
		t.Fatalf("phone1 score %v, want (10*3.5+7)/(10+2)", es[1]["score"])
	}
	code, out = a.do(http.MethodGet, "/api/leaderboards/top-rated?category=phones&limit=1", "", "")
	if es := entries(t, out); code != http.StatusOK || len(es) != 1 || es[0]["item_id"] != "phone1" {
		t.Fatalf("phones: %d %v", code, out)
	}
	code, out = a.do(http.MethodGet, "/api/leaderboards/best-sellers", "", "")
	es = entries(t, out)
	if code != http.StatusOK || out["board"] != "best-sellers" || len(es) != 1 ||
		es[0]["item_id"] != "phone1" || es[0]["name"] != "Phone One" || es[0]["score"] != 3.0 {
		t.Fatalf("best-sellers: %d %v", code, out)
	}
}

// Every error of the rating and leaderboard routes, and that none of them changed anything.
func TestRatingErrors(t *testing.T) {
	a := newRatingAPI(t, 20)
	a.item("it", "Item", "")
	a.buyer("it", "alice")
	cases := []struct {
		name, method, path, user, body string
		status                         int
		code                           string
	}{
		{"stars -1", "POST", "/api/items/it/rating", "alice", `{"stars":-1}`, 400, "invalid_request"},
		{"stars 0", "POST", "/api/items/it/rating", "alice", `{"stars":0}`, 400, "invalid_request"},
		{"stars 6", "POST", "/api/items/it/rating", "alice", `{"stars":6}`, 400, "invalid_request"},
		{"stars 4.5", "POST", "/api/items/it/rating", "alice", `{"stars":4.5}`, 400, "invalid_request"},
		{"stars string", "POST", "/api/items/it/rating", "alice", `{"stars":"4"}`, 400, "invalid_request"},
		{"no stars", "POST", "/api/items/it/rating", "alice", `{}`, 400, "invalid_request"},
		{"unknown field", "POST", "/api/items/it/rating", "alice", `{"stars":4,"x":1}`, 400, "invalid_request"},
		{"Stars", "POST", "/api/items/it/rating", "alice", `{"Stars":4}`, 400, "invalid_request"},
		{"STARS", "POST", "/api/items/it/rating", "alice", `{"STARS":4}`, 400, "invalid_request"},
		{"empty body", "POST", "/api/items/it/rating", "alice", ``, 400, "invalid_request"},
		{"no token", "POST", "/api/items/it/rating", "", `{"stars":4}`, 401, "unauthorized"},
		{"unknown item", "POST", "/api/items/nope/rating", "alice", `{"stars":4}`, 404, "not_found"},
		{"non-buyer", "POST", "/api/items/it/rating", "mallory", `{"stars":4}`, 409, "not_a_buyer"},
		{"limit 0", "GET", "/api/leaderboards/top-rated?limit=0", "", ``, 400, "invalid_request"},
		{"limit -1", "GET", "/api/leaderboards/top-rated?limit=-1", "", ``, 400, "invalid_request"},
		{"limit N+1", "GET", "/api/leaderboards/top-rated?limit=21", "", ``, 400, "invalid_request"},
		{"limit text", "GET", "/api/leaderboards/best-sellers?limit=ten", "", ``, 400, "invalid_request"},
		{"limit empty", "GET", "/api/leaderboards/best-sellers?limit=", "", ``, 400, "invalid_request"},
		{"long category", "GET", "/api/leaderboards/top-rated?category=" + string(bytes.Repeat([]byte("c"), 65)), "", ``, 400, "invalid_request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out := a.do(tc.method, tc.path, tc.user, tc.body)
			if code != tc.status || errCode(out) != tc.code {
				t.Fatalf("got %d %v, want %d %s", code, out, tc.status, tc.code)
			}
			if e, _ := out["error"].(map[string]any); len(out) != 1 || e["message"] == "" {
				t.Fatalf("error body %v", out)
			}
		})
	}
	if ks := a.rdb.Keys(context.Background(), a.keys.Rank()+"*").Val(); len(ks) != 0 {
		t.Fatalf("refused requests wrote %v", ks)
	}
	// limit=N is allowed and an empty board is an empty list, not null.
	code, out := a.do(http.MethodGet, "/api/leaderboards/top-rated?limit=20&category=none", "", "")
	if es := entries(t, out); code != http.StatusOK || len(es) != 0 {
		t.Fatalf("empty board: %d %v", code, out)
	}
}

// Without ?limit= a board returns 10 entries, or N when N is smaller.
func TestLeaderboardDefaultLimit(t *testing.T) {
	for _, size := range []int{3, 100} {
		a := newRatingAPI(t, size)
		for i := range 12 {
			id := fmt.Sprintf("i%02d", i)
			a.item(id, "Item "+id, "")
			a.buyer(id, "u")
			if code, out := a.do(http.MethodPost, "/api/items/"+id+"/rating", "u", fmt.Sprintf(`{"stars":%d}`, 1+i%5)); code != 200 {
				t.Fatalf("rate: %d %v", code, out)
			}
		}
		_, out := a.do(http.MethodGet, "/api/leaderboards/top-rated", "", "")
		if n := len(entries(t, out)); n != min(10, size) {
			t.Fatalf("N=%d: %d entries", size, n)
		}
	}
}

// An admin update that changes an item's category moves it between category boards at once.
func TestCategoryChangeMovesBoard(t *testing.T) {
	a := newRatingAPI(t, 100)
	a.item("book1", "Book One", "phones")
	a.buyer("book1", "ann")
	if code, out := a.do(http.MethodPost, "/api/items/book1/rating", "ann", `{"stars":5}`); code != http.StatusOK {
		t.Fatalf("rate: %d %v", code, out)
	}
	body := `{"name":"Book One","category":"books","price_cents":100,"per_user_limit":100}`
	if code, out := a.do(http.MethodPut, "/api/admin/items/book1", "admin", body); code != http.StatusOK {
		t.Fatalf("update: %d %v", code, out)
	}
	_, books := a.do(http.MethodGet, "/api/leaderboards/top-rated?category=books", "", "")
	_, phones := a.do(http.MethodGet, "/api/leaderboards/top-rated?category=phones", "", "")
	if e := entries(t, books); len(e) != 1 || e[0]["item_id"] != "book1" {
		t.Fatalf("books board: %v", books)
	}
	if e := entries(t, phones); len(e) != 0 {
		t.Fatalf("phones board still lists the item: %v", phones)
	}
}

// An import that changes rated items' categories moves them between category boards, as
// row-by-row updates did: an item's last row decides, an unchanged or unrated item stays.
func TestImportMovesBoards(t *testing.T) {
	a := newRatingAPI(t, 100)
	for id, cat := range map[string]string{"b1": "phones", "b2": "phones", "b3": "books", "u1": "phones"} {
		a.item(id, "Item "+id, cat)
		if id != "u1" {
			a.buyer(id, "ann")
			if code, out := a.do(http.MethodPost, "/api/items/"+id+"/rating", "ann", `{"stars":4}`); code != http.StatusOK {
				t.Fatalf("rate %s: %d %v", id, code, out)
			}
		}
	}
	var rows []string
	for _, r := range [][2]string{{"b1", "books"}, {"b2", "phones"}, {"b3", ""}, {"u1", "books"}, {"b1", "toys"}} {
		rows = append(rows, fmt.Sprintf(`{"id":%q,"name":"Item %s","category":%q,"price_cents":100,"per_user_limit":100}`, r[0], r[0], r[1]))
	}
	if code, out := a.do(http.MethodPost, "/api/admin/items/import", "admin", "["+strings.Join(rows, ",")+"]"); code != http.StatusOK || out["updated"] != 5.0 {
		t.Fatalf("import: %d %v", code, out)
	}
	for board, want := range map[string][]string{"toys": {"b1"}, "books": {}, "phones": {"b2"}, "": {"b1", "b2", "b3"}} {
		_, out := a.do(http.MethodGet, "/api/leaderboards/top-rated?category="+board, "", "")
		var got []string
		for _, e := range entries(t, out) {
			got = append(got, e["item_id"].(string))
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("board %q lists %v, want %v", board, got, want)
		}
	}
}

// A rating on an instance whose catalogue snapshot predates a category change (made on
// another instance) keeps the item on its new category's board: the rating reads the item's
// own record, not the snapshot.
func TestRatingOnStaleSnapshotKeepsNewCategory(t *testing.T) {
	a := &ratingAPI{newRankedAPI(t, func(cfg *config.Config) {
		cfg.SnapshotInterval = time.Hour // this instance's snapshot stays as first loaded
		cfg.LimitRating = config.Limit{Rate: 1000, Period: 1e9, Burst: 1000}
	})}
	a.item("book2", "Book Two", "phones")
	a.buyer("book2", "ann")
	if code, _ := a.do(http.MethodGet, "/api/items", "", ""); code != http.StatusOK {
		t.Fatal("catalogue")
	}
	// Another api instance moves the item to "books".
	other := inventory.NewStore(a.rdb, a.keys, options.Inventory(inventory.Options{}))
	if _, _, err := other.Upsert(t.Context(), inventory.Input{ID: "book2", Name: "Book Two", Category: "books", PriceCents: 100, PerUserLimit: 100}); err != nil {
		t.Fatal(err)
	}
	if err := a.rank.SetCategory(t.Context(), "book2", "books"); err != nil {
		t.Fatal(err)
	}
	if it, _ := a.inv.Lookup(t.Context(), "book2"); it.Category != "phones" {
		t.Fatalf("the snapshot should still say phones (the test's premise): %q", it.Category)
	}
	if code, out := a.do(http.MethodPost, "/api/items/book2/rating", "ann", `{"stars":4}`); code != http.StatusOK {
		t.Fatalf("rate: %d %v", code, out)
	}
	_, books := a.do(http.MethodGet, "/api/leaderboards/top-rated?category=books", "", "")
	_, phones := a.do(http.MethodGet, "/api/leaderboards/top-rated?category=phones", "", "")
	if e := entries(t, books); len(e) != 1 || e[0]["item_id"] != "book2" {
		t.Fatalf("books board: %v", books)
	}
	if e := entries(t, phones); len(e) != 0 {
		t.Fatalf("the stale snapshot moved the item back to phones: %v", phones)
	}
}
