package ranking_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/ranking"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

var defaults = ranking.Options{Size: 100, PriorMean: 3.5, PriorWeight: 10}

// A single 5-star rating must not beat hundreds of 4.8s (the point of the Bayesian score).
func TestScoreDampsFewRatings(t *testing.T) {
	e := newEnv(t, defaults)
	e.buyer("lucky", "u0", 1)
	e.rate("lucky", "", "u0", 5)
	for i := range 200 {
		u := fmt.Sprintf("u%d", i)
		e.buyer("steady", u, 1)
		stars := 5
		if i%5 == 0 {
			stars = 4 // mean 4.8
		}
		e.rate("steady", "", u, stars)
	}
	got := e.topRated("", 2)
	if !slices.Equal(ids(got), []string{"steady", "lucky"}) {
		t.Fatalf("order %v", got)
	}
	if want := 40.0 / 11; got[1].Score != want {
		t.Fatalf("one 5-star scores %v, want (10*3.5+5)/(10+1) = %v", got[1].Score, want)
	}
}

// N=1: the only slot goes to the best; when its score goes down, an item the bounded set
// had evicted comes back.
func TestSizeOneScoreGoesDown(t *testing.T) {
	e := newEnv(t, ranking.Options{Size: 1, PriorMean: 3, PriorWeight: 0})
	for _, it := range []string{"a", "b", "c"} {
		e.buyer(it, "u", 1)
	}
	e.rate("a", "", "u", 4)
	e.rate("b", "", "u", 3)
	e.rate("c", "", "u", 5)
	if got := ids(e.topRated("", 1)); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("got %v, want [c]", got)
	}
	e.rate("c", "", "u", 1) // re-rating replaces: c falls to 1, a (evicted earlier) is best
	if got := ids(e.topRated("", 1)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("got %v, want [a]", got)
	}
	e.rate("a", "", "u", 2)
	if got := ids(e.topRated("", 1)); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("got %v, want [b]", got)
	}
	if _, err := e.rank.TopRated(ctx, "", 2); !errors.Is(err, ranking.ErrInvalid) {
		t.Fatalf("limit 2 > N=1: got %v", err)
	}
}

// Equal scores: more ratings first, then the smaller item id.
func TestTieBreak(t *testing.T) {
	e := newEnv(t, ranking.Options{Size: 10, PriorMean: 3, PriorWeight: 2})
	rate := func(item string, stars ...int) {
		for i, s := range stars {
			u := fmt.Sprintf("u%d", i)
			e.buyer(item, u, 1)
			e.rate(item, "", u, s)
		}
	}
	rate("a", 3)       // (6+3)/(2+1) = 3, one rating
	rate("b", 3, 3)    // (6+6)/(2+2) = 3, two ratings
	rate("c", 3)       // 3, one rating, id after a
	rate("d", 5, 1, 3) // (6+9)/(2+3) = 3, three ratings
	rate("e", 4)       // 10/3, best
	got := e.topRated("", 10)
	if want := []string{"e", "d", "b", "a", "c"}; !slices.Equal(ids(got), want) {
		t.Fatalf("order %v, want %v", ids(got), want)
	}
	for i, en := range got[1:] {
		if en.Score != 3 || en.Rank != i+2 {
			t.Fatalf("entry %+v", en)
		}
	}
}

// N larger than the number of items: every rated item is listed, nothing more.
func TestSizeLargerThanItems(t *testing.T) {
	e := newEnv(t, ranking.Options{Size: 50, PriorMean: 3.5, PriorWeight: 10})
	for i := range 3 {
		it := fmt.Sprintf("i%d", i)
		e.buyer(it, "u", 1)
		e.rate(it, "", "u", 1+i)
		if err := e.rank.SetSold(ctx, it, int64(10-i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := ids(e.topRated("", 50)); !slices.Equal(got, []string{"i2", "i1", "i0"}) {
		t.Fatalf("top-rated %v", got)
	}
	best, err := e.rank.BestSellers(ctx, 50)
	if err != nil || !slices.Equal(ids(best), []string{"i0", "i1", "i2"}) || best[0].Score != 10 {
		t.Fatalf("best sellers %v %v", best, err)
	}
	if got := e.topRated("nothing-here", 5); len(got) != 0 {
		t.Fatalf("empty category board %v", got)
	}
}

// Every refusal of Rate and of the reads: bad input changes nothing.
func TestRateRefusals(t *testing.T) {
	e := newEnv(t, defaults)
	e.buyer("it", "buyer", 2)
	e.rdb.HSet(ctx, e.keys.Item("it").PaidBy(), "gaveback", 0)
	cases := []struct {
		name   string
		item   string
		cat    string
		user   string
		stars  int
		target error
	}{
		{"stars -1", "it", "", "buyer", -1, ranking.ErrInvalid},
		{"stars 0", "it", "", "buyer", 0, ranking.ErrInvalid},
		{"stars 6", "it", "", "buyer", 6, ranking.ErrInvalid},
		{"bad item id", "it:x", "", "buyer", 4, ranking.ErrInvalid},
		{"bad user id", "it", "", "", 4, ranking.ErrInvalid},
		{"long category", "it", string(make([]byte, 65)), "buyer", 4, ranking.ErrInvalid},
		{"non-buyer", "it", "", "stranger", 4, ranking.ErrNotABuyer},
		{"zero units paid", "it", "", "gaveback", 4, ranking.ErrNotABuyer},
		{"buyer of another item", "other", "", "buyer", 4, ranking.ErrNotABuyer},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.rank.Rate(ctx, tc.item, tc.cat, tc.user, tc.stars); !errors.Is(err, tc.target) {
				t.Fatalf("got %v, want %v", err, tc.target)
			}
		})
	}
	if n := e.rdb.Keys(ctx, e.keys.Rank()+"*").Val(); len(n) != 0 {
		t.Fatalf("refused ratings wrote %v", n)
	}
	for _, limit := range []int{-1, 0, 101} {
		if _, err := e.rank.TopRated(ctx, "", limit); !errors.Is(err, ranking.ErrInvalid) {
			t.Fatalf("limit %d: %v", limit, err)
		}
		if _, err := e.rank.BestSellers(ctx, limit); !errors.Is(err, ranking.ErrInvalid) {
			t.Fatalf("limit %d: %v", limit, err)
		}
	}
	if err := e.rank.SetSold(ctx, "it", -1); !errors.Is(err, ranking.ErrInvalid) {
		t.Fatalf("negative units: %v", err)
	}
}

// The scripts themselves refuse malformed arguments before writing anything (Redis has no
// rollback), including what tonumber accepts but is no number of stars: nan, inf, 4.5.
func TestScriptsRefuseMalformedArguments(t *testing.T) {
	e := newEnv(t, defaults)
	rate := exactlyonce.New("rank_rate", "ranking/board.lua", "ranking/rate.lua")
	sold := exactlyonce.New("rank_sold", "ranking/board.lua", "ranking/sold.lua")
	overall := e.keys.TopRatedBoard("")
	keys := []string{e.keys.ItemRatings("it"), e.keys.ItemRatingStats("it"), e.keys.RankOutbox(),
		overall.Index, overall.Top}
	good := []any{"it", "u", "4", "", "", "3.5", "10", "100"}
	with := func(i int, v any) []any { a := slices.Clone(good); a[i] = v; return a }
	for name, args := range map[string][]any{
		"stars nan": with(2, "nan"), "stars inf": with(2, "inf"), "stars 4.5": with(2, "4.5"),
		"stars 0": with(2, "0"), "stars 6": with(2, "6"), "stars x": with(2, "x"),
		"mean nan": with(5, "nan"), "mean 6": with(5, "6"), "weight -1": with(6, "-1"),
		"weight inf": with(6, "inf"), "size 0": with(7, "0"), "size inf": with(7, "inf"),
		"no user": with(1, ""), "category keys missing": with(3, "phones"),
		"mode x": append(slices.Clone(good), "x"), "mode ''": append(slices.Clone(good), ""),
		"ten args": append(slices.Clone(good), "restore", "x"),
	} {
		if err := rate.Run(ctx, e.rdb, keys, args...).Err(); err == nil {
			t.Errorf("rate %s: accepted", name)
		}
	}
	b := e.keys.BestSellersBoard()
	for name, args := range map[string][]any{
		"units -1": {"it", "-1", "10"}, "units nan": {"it", "nan", "10"}, "units 1.5": {"it", "1.5", "10"},
		"size 0": {"it", "1", "0"},
	} {
		if err := sold.Run(ctx, e.rdb, []string{b.Index, b.Top}, args...).Err(); err == nil {
			t.Errorf("sold %s: accepted", name)
		}
	}
	if n := e.rdb.Keys(ctx, e.keys.Rank()+"*").Val(); len(n) != 0 {
		t.Fatalf("refused calls wrote %v", n)
	}
	// A stale category (a concurrent call moved the item elsewhere) is reported and writes nothing.
	if err := rate.Run(ctx, e.rdb, keys, good...).Err(); err != nil {
		t.Fatal(err)
	}
	before := e.rdb.XLen(ctx, e.keys.RankOutbox()).Val()
	args := with(3, "books")
	args[4] = "phones" // the caller thinks it is a phone, the script finds it ranked under ''
	reply, err := rate.Run(ctx, e.rdb, append(slices.Clone(keys), "x1", "x2", "x3", "x4"), args...).Slice()
	if err != nil || len(reply) != 2 || reply[0] != "stale" || reply[1] != "" {
		t.Fatalf("stale: %v %v", reply, err)
	}
	if e.rdb.XLen(ctx, e.keys.RankOutbox()).Val() != before {
		t.Fatal("stale call wrote an event")
	}
}

// A re-rating of an item whose stats hash is gone (deleted by hand: the script writes it with
// every rating) is refused before anything is written, so no stars or sum are written without
// their rating.set entry.
func TestRateWithoutStatsWritesNothing(t *testing.T) {
	e := newEnv(t, defaults)
	e.buyer("it", "alice", 1)
	e.rate("it", "", "alice", 3)
	e.rdb.Del(ctx, e.keys.ItemRatingStats("it"))
	events := e.rdb.XLen(ctx, e.keys.RankOutbox()).Val()
	if _, err := e.rank.Rate(ctx, "it", "", "alice", 5); err == nil {
		t.Fatal("re-rating without stats: accepted")
	}
	if got := e.rdb.HGet(ctx, e.keys.ItemRatings("it"), "alice").Val(); got != "3" {
		t.Fatalf("the refused call changed the stars to %q", got)
	}
	if n := e.rdb.Exists(ctx, e.keys.ItemRatingStats("it")).Val(); n != 0 {
		t.Fatalf("the refused call wrote the stats: %v", e.rdb.HGetAll(ctx, e.keys.ItemRatingStats("it")).Val())
	}
	if n := e.rdb.XLen(ctx, e.keys.RankOutbox()).Val(); n != events {
		t.Fatalf("the refused call appended %d entries", n-events)
	}
}

// A rating appends one rating.set entry with the design's flat fields.
func TestOutboxEntry(t *testing.T) {
	e := newEnv(t, defaults)
	e.buyer("it", "alice", 1)
	e.rate("it", "books", "alice", 4)
	e.rate("it", "books", "alice", 2)
	msgs := e.rdb.XRange(ctx, e.keys.RankOutbox(), "-", "+").Val()
	if len(msgs) != 2 {
		t.Fatalf("%d entries", len(msgs))
	}
	v := msgs[1].Values
	at, _ := strconv.ParseInt(fmt.Sprint(v["at"]), 10, 64)
	if v["type"] != "rating.set" || v["item"] != "it" || v["user"] != "alice" || v["stars"] != "2" || at <= 0 || len(v) != 5 {
		t.Fatalf("entry %v", v)
	}
}

// Restore (restore's replay of a recorded rating) writes only a rating the user does not have,
// never replacing stars set since, and emits no rating.set: the record already holds it.
func TestRestoreFillsOnlyMissingRatings(t *testing.T) {
	e := newEnv(t, ranking.Options{Size: 10, PriorMean: 3, PriorWeight: 0})
	for _, u := range []string{"alice", "bob"} {
		e.buyer("it", u, 1)
	}
	e.rate("it", "books", "alice", 5)
	events := e.rdb.XLen(ctx, e.keys.RankOutbox()).Val()
	r, restored, err := e.rank.Restore(ctx, "it", "books", "alice", 2) // her older recorded stars
	if err != nil || restored || r.Count != 1 || r.Average != 5 {
		t.Fatalf("restore over alice's live 5: %+v restored %v %v", r, restored, err)
	}
	r, restored, err = e.rank.Restore(ctx, "it", "books", "bob", 2)
	if err != nil || !restored || r.Count != 2 || r.Average != 3.5 {
		t.Fatalf("restore of bob's missing 2: %+v restored %v %v", r, restored, err)
	}
	if got := e.rdb.HGetAll(ctx, e.keys.ItemRatings("it")).Val(); got["alice"] != "5" || got["bob"] != "2" || len(got) != 2 {
		t.Fatalf("ratings %v", got)
	}
	if n := e.rdb.XLen(ctx, e.keys.RankOutbox()).Val(); n != events {
		t.Fatalf("restore wrote %d rating.set entries", n-events)
	}
	for _, cat := range []string{"", "books"} {
		if got := e.topRated(cat, 10); len(got) != 1 || got[0].ItemID != "it" || got[0].Score != 3.5 {
			t.Fatalf("top-rated %q: %v", cat, got)
		}
	}
	// A shopper's rating after the replay replaces the replayed stars as usual.
	if r := e.rate("it", "books", "bob", 4); r.Count != 2 || r.Average != 4.5 {
		t.Fatalf("bob re-rates: %+v", r)
	}
	if _, _, err := e.rank.Restore(ctx, "it", "books", "carol", 3); !errors.Is(err, ranking.ErrNotABuyer) {
		t.Fatalf("restore of a non-buyer's rating: %v", err)
	}
}

// An item whose category changed moves between category boards: on its next rating, or at
// once through SetCategory; either way it is on exactly one category board.
func TestCategoryMove(t *testing.T) {
	e := newEnv(t, ranking.Options{Size: 2, PriorMean: 3, PriorWeight: 0})
	for i, it := range []string{"p1", "p2", "p3"} {
		e.buyer(it, "u", 1)
		e.rate(it, "phones", "u", 5-i)
	}
	if got := ids(e.topRated("phones", 2)); !slices.Equal(got, []string{"p1", "p2"}) {
		t.Fatalf("phones %v", got)
	}
	e.rate("p1", "books", "u", 5) // p1 now a book: p3 enters the phones top
	if got := ids(e.topRated("phones", 2)); !slices.Equal(got, []string{"p2", "p3"}) {
		t.Fatalf("phones after move %v", got)
	}
	if got := ids(e.topRated("books", 2)); !slices.Equal(got, []string{"p1"}) {
		t.Fatalf("books %v", got)
	}
	if err := e.rank.SetCategory(ctx, "p2", "books"); err != nil {
		t.Fatal(err)
	}
	if err := e.rank.SetCategory(ctx, "p3", ""); err != nil { // no category: overall only
		t.Fatal(err)
	}
	if got := ids(e.topRated("phones", 2)); len(got) != 0 {
		t.Fatalf("phones after moves %v", got)
	}
	if got := ids(e.topRated("books", 2)); !slices.Equal(got, []string{"p1", "p2"}) {
		t.Fatalf("books after moves %v", got)
	}
	if got := ids(e.topRated("", 2)); !slices.Equal(got, []string{"p1", "p2"}) {
		t.Fatalf("overall %v", got)
	}
	if err := e.rank.SetCategory(ctx, "never-rated", "books"); err != nil {
		t.Fatal(err)
	}
	if got := ids(e.topRated("books", 2)); !slices.Equal(got, []string{"p1", "p2"}) {
		t.Fatalf("unrated item placed: %v", got)
	}
}

// A changed N (configuration) heals on the next update of a board: trimmed or refilled.
func TestSizeChangeHeals(t *testing.T) {
	e := newEnv(t, ranking.Options{Size: 5, PriorMean: 3, PriorWeight: 0})
	rateAll := func(s *ranking.Store, n int) {
		for i := range n {
			it := fmt.Sprintf("i%d", i)
			e.buyer(it, "u", 1)
			if _, err := s.Rate(ctx, it, "", "u", 1+i%5); err != nil {
				t.Fatal(err)
			}
		}
	}
	rateAll(e.rank, 8)
	small := ranking.NewStore(e.rdb, e.keys, ranking.Options{Size: 3, PriorMean: 3, PriorWeight: 0})
	rateAll(small, 1)
	if n := e.rdb.ZCard(ctx, e.keys.TopRatedBoard("").Top).Val(); n != 3 {
		t.Fatalf("after N 5 -> 3 the top holds %d", n)
	}
	big := ranking.NewStore(e.rdb, e.keys, ranking.Options{Size: 7, PriorMean: 3, PriorWeight: 0})
	rateAll(big, 1)
	got, err := big.TopRated(ctx, "", 7)
	if err != nil || len(got) != 7 {
		t.Fatalf("after N 3 -> 7: %v %v", got, err)
	}
}

// Many goroutines rate the same items (re-rating, moving them between categories) while
// payments report paid totals out of order: counts, sums, boards and events stay exact.
func TestConcurrentRatings(t *testing.T) {
	e := newEnv(t, ranking.Options{Size: 3, PriorMean: 3.5, PriorWeight: 10})
	items := []string{"a", "b", "c", "d", "e"}
	const workers, usersEach, opsEach = 16, 4, 120
	for w := range workers {
		for u := range usersEach {
			for _, it := range items {
				e.buyer(it, fmt.Sprintf("w%du%d", w, u), 1)
			}
		}
	}
	final := make([]map[[2]string]int, workers) // per worker: (item, user) -> last stars
	var wg sync.WaitGroup
	errs := make(chan error, workers*2)
	for w := range workers {
		final[w] = map[[2]string]int{}
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range opsEach {
				it := items[(w+i*7)%len(items)]
				user := fmt.Sprintf("w%du%d", w, i%usersEach)
				stars := 1 + (w*31+i*17)%5
				cat := []string{"phones", "books"}[(w+i)%2]
				if _, err := e.rank.Rate(ctx, it, cat, user, stars); err != nil {
					errs <- err
					return
				}
				final[w][[2]string{it, user}] = stars
			}
		}()
		go func() {
			defer wg.Done()
			for i := range 60 {
				if err := e.rank.SetSold(ctx, items[i%len(items)], int64(1+(w*13+i*29)%500)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	m := newModel(e.opt)
	var ratings int64
	for w := range workers {
		for k, stars := range final[w] {
			m.rate(k[0], "", k[1], stars)
		}
		ratings += opsEach
	}
	for _, it := range items {
		h := e.rdb.HGetAll(ctx, e.keys.ItemRatingStats(it)).Val()
		count, sum := m.stats(it)
		if h["count"] != fmt.Sprint(count) || h["sum"] != fmt.Sprint(sum) {
			t.Fatalf("%s: stats %v, want count %d sum %d", it, h, count, sum)
		}
		if n := e.rdb.HLen(ctx, e.keys.ItemRatings(it)).Val(); n != count {
			t.Fatalf("%s: %d ratings stored, want %d", it, n, count)
		}
		m.ranked[it] = h["cat"] // the last rating decides the category
		m.sold[it] = 0
	}
	for i := range items {
		best := int64(0)
		for w := range workers {
			for j := i; j < 60; j += len(items) {
				best = max(best, int64(1+(w*13+j*29)%500))
			}
		}
		m.sold[items[i]] = best
	}
	e.checkBoards(m, []string{"phones", "books"}, "after the race")
	for _, en := range e.topRated("", 3) {
		if math.IsNaN(en.Score) {
			t.Fatal("NaN score")
		}
	}
	if n := e.rdb.XLen(ctx, e.keys.RankOutbox()).Val(); n != ratings {
		t.Fatalf("%d events, want %d", n, ratings)
	}
}

// On Redis Cluster every ranking script runs in the {rank} slot (no CROSSSLOT), the buyer
// check reads the item's slot, and a Redis that lost its script cache is served by EVAL.
func TestClusterAndScriptFlush(t *testing.T) {
	crdb, ckeys := testenv.Cluster(t)
	prdb, pkeys, _ := testenv.PrivateRedis(t)
	for name, e := range map[string]*env{
		"cluster": {t: t, rdb: crdb, keys: ckeys, opt: defaults, rank: ranking.NewStore(crdb, ckeys, defaults)},
		"flushed": {t: t, rdb: prdb, keys: pkeys, opt: defaults, rank: ranking.NewStore(prdb, pkeys, defaults)},
	} {
		t.Run(name, func(t *testing.T) {
			if name == "flushed" {
				if err := prdb.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			e.t = t
			e.buyer("a", "u", 1)
			e.buyer("b", "u", 1)
			e.rate("a", "phones", "u", 5)
			e.rate("b", "phones", "u", 4)
			e.rate("a", "books", "u", 3) // moves a between category boards
			if err := e.rank.SetCategory(ctx, "b", "books"); err != nil {
				t.Fatal(err)
			}
			if err := e.rank.SetSold(ctx, "a", 7); err != nil {
				t.Fatal(err)
			}
			if got := ids(e.topRated("books", 2)); !slices.Equal(got, []string{"b", "a"}) {
				t.Fatalf("books %v", got)
			}
			if got := ids(e.topRated("phones", 2)); len(got) != 0 {
				t.Fatalf("phones %v", got)
			}
			if best, err := e.rank.BestSellers(ctx, 1); err != nil || len(best) != 1 || best[0].Score != 7 {
				t.Fatalf("best sellers %v %v", best, err)
			}
		})
	}
}

// TestSoldNumbered: a numbered best-sellers figure replaces the board's, up or down, unless a
// report numbered as high or higher was applied (a late report changes nothing, in any
// order, however many goroutines race); a figure of 0 leaves the board; an unnumbered one (a
// restore's) only raises it.
func TestSoldNumbered(t *testing.T) {
	e := newEnv(t, ranking.Options{Size: 2, PriorMean: 3.5, PriorWeight: 10})
	held := func(item string) float64 {
		best, err := e.rank.BestSellers(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range best {
			if b.ItemID == item {
				return b.Score
			}
		}
		return 0
	}
	for _, it := range []string{"a", "b", "c"} {
		if err := e.rank.SetSoldAt(ctx, it, 5, 100); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		item      string
		units     int64
		seq       int64
		want      float64
		wantBoard []string
	}{
		{"a", 3, 101, 3, []string{"b", "c"}}, // down: a leaves the top two, a waiting member comes in
		{"a", 9, 101, 0, []string{"b", "c"}}, // the same number again: late
		{"a", 9, 100, 0, []string{"b", "c"}}, // an older one: late
		{"a", 8, 102, 8, []string{"a", "b"}},
		{"b", 0, 200, 0, []string{"a", "c"}}, // to 0: off the board
		{"a", 4, 0, 8, []string{"a", "c"}},   // unnumbered and lower: kept
		{"c", 6, 0, 6, []string{"a", "c"}},   // unnumbered and higher: raised
		{"c", 2, 150, 2, []string{"a", "c"}}, // numbered after it: down again
	}
	for i, s := range steps {
		if err := e.rank.SetSoldAt(ctx, s.item, s.units, s.seq); err != nil {
			t.Fatal(err)
		}
		best, err := e.rank.BestSellers(ctx, 2)
		if err != nil || !slices.Equal(ids(best), s.wantBoard) {
			t.Fatalf("step %d: board %v %v, want %v", i, best, err, s.wantBoard)
		}
		if got := held(s.item); slices.Contains(s.wantBoard, s.item) && got != s.want {
			t.Fatalf("step %d: %s holds %v, want %v", i, s.item, got, s.want)
		}
	}
	if err := e.rank.SetSoldAt(ctx, "a", 1, -1); !errors.Is(err, ranking.ErrInvalid) {
		t.Fatalf("a negative number: %v", err)
	}

	// Racing reports of one item, numbered 1..200 with the figure = the number: whatever the
	// order, the board ends at the highest.
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				n := int64(w*25 + i + 1)
				if err := e.rank.SetSoldAt(ctx, "z", n, n); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	best, err := e.rank.BestSellers(ctx, 1)
	if err != nil || len(best) != 1 || best[0].ItemID != "z" || best[0].Score != 200 {
		t.Fatalf("after racing reports: %v %v", best, err)
	}
}
