package ranking_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/ranking"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

var ctx = context.Background()

type env struct {
	t    testing.TB
	rdb  redis.UniversalClient
	keys keyspace.Space
	rank *ranking.Store
	opt  ranking.Options
}

func newEnv(t testing.TB, opt ranking.Options) *env {
	t.Helper()
	rdb, keys := testenv.Redis(t)
	return &env{t: t, rdb: rdb, keys: keys, rank: ranking.NewStore(rdb, keys, opt), opt: opt}
}

// buyer records a paid order the way the pay script does (user -> units paid).
func (e *env) buyer(item, user string, units int64) {
	e.t.Helper()
	if err := e.rdb.HIncrBy(ctx, e.keys.Item(item).PaidBy(), user, units).Err(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) rate(item, category, user string, stars int) ranking.Rating {
	e.t.Helper()
	r, err := e.rank.Rate(ctx, item, category, user, stars)
	if err != nil {
		e.t.Fatalf("rate %s by %s: %v", item, user, err)
	}
	return r
}

func (e *env) topRated(category string, limit int) []ranking.Entry {
	e.t.Helper()
	got, err := e.rank.TopRated(ctx, category, limit)
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

func ids(es []ranking.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ItemID
	}
	return out
}

// model is the plain Go statement of the boards: every rated item, scored and ordered as
// documented (score descending, then more ratings, then smaller item id), cut at N.
type model struct {
	opt    ranking.Options
	stars  map[string]map[string]int // item -> user -> stars
	ranked map[string]string         // item -> category it is ranked under
	sold   map[string]int64          // item -> largest paid total reported
}

func newModel(opt ranking.Options) *model {
	return &model{opt: opt, stars: map[string]map[string]int{}, ranked: map[string]string{},
		sold: map[string]int64{}}
}

func (m *model) rate(item, category, user string, stars int) (count, sum int64) {
	if m.stars[item] == nil {
		m.stars[item] = map[string]int{}
	}
	m.stars[item][user] = stars
	m.ranked[item] = category
	return m.stats(item)
}

func (m *model) stats(item string) (count, sum int64) {
	for _, s := range m.stars[item] {
		count++
		sum += int64(s)
	}
	return count, sum
}

func (m *model) topRated(category string) []ranking.Entry {
	type row struct {
		id    string
		count int64
		score float64
	}
	var rows []row
	for id, cat := range m.ranked {
		if category != "" && cat != category {
			continue
		}
		count, sum := m.stats(id)
		rows = append(rows, row{id, count, ranking.Score(m.opt.PriorMean, m.opt.PriorWeight, count, sum)})
	}
	sort.Slice(rows, func(a, b int) bool {
		x, y := rows[a], rows[b]
		if x.score != y.score {
			return x.score > y.score
		}
		if x.count != y.count {
			return x.count > y.count
		}
		return x.id < y.id
	})
	out := []ranking.Entry{}
	for i, r := range rows {
		if i == m.opt.Size {
			break
		}
		out = append(out, ranking.Entry{Rank: i + 1, ItemID: r.id, Score: r.score})
	}
	return out
}

func (m *model) bestSellers() []ranking.Entry {
	var rows []ranking.Entry
	for id, units := range m.sold {
		if units > 0 {
			rows = append(rows, ranking.Entry{ItemID: id, Score: float64(units)})
		}
	}
	sort.Slice(rows, func(a, b int) bool {
		if rows[a].Score != rows[b].Score {
			return rows[a].Score > rows[b].Score
		}
		return rows[a].ItemID < rows[b].ItemID
	})
	if len(rows) > m.opt.Size {
		rows = rows[:m.opt.Size]
	}
	for i := range rows {
		rows[i].Rank = i + 1
	}
	if rows == nil {
		rows = []ranking.Entry{}
	}
	return rows
}

// checkBoards compares every board (overall, each category, best sellers) with the model,
// entry by entry with exact scores, and checks no materialised top holds more than N.
func (e *env) checkBoards(m *model, categories []string, when string) {
	e.t.Helper()
	check := func(name, topKey string, got, want []ranking.Entry) {
		e.t.Helper()
		if !slices.Equal(got, want) {
			e.t.Fatalf("%s: board %s\n got  %v\n want %v", when, name, got, want)
		}
		if n := e.rdb.ZCard(ctx, topKey).Val(); n != int64(len(want)) {
			e.t.Fatalf("%s: board %s holds %d members, want %d", when, name, n, len(want))
		}
	}
	for _, cat := range append([]string{""}, categories...) {
		check("top-rated "+cat, e.keys.TopRatedBoard(cat).Top, e.topRated(cat, e.opt.Size), m.topRated(cat))
	}
	got, err := e.rank.BestSellers(ctx, e.opt.Size)
	if err != nil {
		e.t.Fatal(err)
	}
	check("best-sellers", e.keys.BestSellersBoard().Top, got, m.bestSellers())
}

// TestModel applies random operations (rate, re-rate, non-buyers, new items and buyers,
// category changes, payments reported in and out of order) to the real boards and to the
// model; after every batch each board equals the model's top N exactly, ties included.
func TestModel(t *testing.T) {
	cases := []struct {
		name string
		opt  ranking.Options
		ops  int
	}{
		// m=3, C=2 makes equal scores with different counts common: (6+3)/3 = (6+6)/4.
		{"N=7 ties", ranking.Options{Size: 7, PriorMean: 3, PriorWeight: 2}, 20000},
		{"N=1", ranking.Options{Size: 1, PriorMean: 3.5, PriorWeight: 10}, 3000},
		{"N>items", ranking.Options{Size: 500, PriorMean: 3.5, PriorWeight: 10}, 3000},
		{"plain mean", ranking.Options{Size: 4, PriorMean: 4, PriorWeight: 0}, 3000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runModel(t, tc.opt, tc.ops, rand.New(rand.NewPCG(uint64(tc.opt.Size), 42)))
		})
	}
}

func runModel(t *testing.T, opt ranking.Options, ops int, rng *rand.Rand) {
	e := newEnv(t, opt)
	m := newModel(opt)
	categories := []string{"phones", "books", "shoes", "x:idx"}
	catalogue := map[string]string{} // item -> category now (as the catalogue says)
	buyers := map[string][]string{}  // item -> users who paid
	paid := map[string]int64{}       // item -> paid total
	var items []string
	var ratings int64
	newItem := func() string {
		id := fmt.Sprintf("it%03d", len(items))
		items = append(items, id)
		catalogue[id] = append(categories, "")[rng.IntN(len(categories)+1)]
		return id
	}
	for range 5 {
		newItem()
	}
	pick := func() string { return items[rng.IntN(len(items))] }
	const batch = 250
	for op := 1; op <= ops; op++ {
		switch p := rng.IntN(100); {
		case p < 45: // rate or re-rate by a buyer
			item := pick()
			if len(buyers[item]) == 0 {
				continue
			}
			user := buyers[item][rng.IntN(len(buyers[item]))]
			stars := 1 + rng.IntN(5)
			if rng.IntN(3) > 0 { // items have a character, so scores spread and tie
				stars = 3 + len(item)%3 + rng.IntN(2)
				stars = min(stars, 5)
			}
			got := e.rate(item, catalogue[item], user, stars)
			count, sum := m.rate(item, catalogue[item], user, stars)
			ratings++
			want := float64(sum) / float64(count)
			if got.Count != count || got.Average != want || got.ItemID != item {
				t.Fatalf("rate %s: got %+v, want count %d average %v", item, got, count, want)
			}
		case p < 52: // a non-buyer is refused and changes nothing
			item := pick()
			_, err := e.rank.Rate(ctx, item, catalogue[item], "stranger", 5)
			if !errors.Is(err, ranking.ErrNotABuyer) {
				t.Fatalf("non-buyer: got %v", err)
			}
		case p < 67: // a payment: a buyer (new or not) pays, the hook reports the total
			item := pick()
			user := fmt.Sprintf("u%02d", rng.IntN(30))
			units := int64(1 + rng.IntN(3))
			e.buyer(item, user, units)
			if !slices.Contains(buyers[item], user) {
				buyers[item] = append(buyers[item], user)
			}
			paid[item] += units
			if err := e.rank.SetSold(ctx, item, paid[item]); err != nil {
				t.Fatal(err)
			}
			m.sold[item] = paid[item]
		case p < 72: // a late, smaller report of a paid total changes nothing
			item := pick()
			if paid[item] > 0 {
				if err := e.rank.SetSold(ctx, item, rng.Int64N(paid[item])); err != nil {
					t.Fatal(err)
				}
			}
		case p < 82: // the catalogue changes an item's category
			catalogue[pick()] = append(categories, "")[rng.IntN(len(categories)+1)]
		case p < 87: // the move is pushed to the boards without a rating
			item := pick()
			if err := e.rank.SetCategory(ctx, item, catalogue[item]); err != nil {
				t.Fatal(err)
			}
			if _, rated := m.ranked[item]; rated {
				m.ranked[item] = catalogue[item]
			}
		default:
			if len(items) < 80 {
				newItem()
			}
		}
		if op%batch == 0 || op == ops {
			e.checkBoards(m, categories, fmt.Sprintf("after op %d", op))
		}
	}
	if n := e.rdb.XLen(ctx, e.keys.RankOutbox()).Val(); n != ratings {
		t.Fatalf("outbox holds %d rating.set entries, want %d", n, ratings)
	}
	t.Logf("%d items, %d ratings", len(items), ratings)
}
