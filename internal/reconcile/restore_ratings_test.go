package reconcile_test

import (
	"context"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/ranking"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// ratedEnv is a pipeline on a private Redis with item A bought and paid by alice, bob and
// carol, rated 4 by alice and then 2 by bob (carol has not rated), all of it in the record;
// then Redis loses everything.
func ratedEnv(t *testing.T) (*env, *ranking.Store) {
	rdb, keys, _ := testenv.PrivateRedis(t)
	e := newEnvOn(t, rdb, keys)
	rank := ranking.NewStore(rdb, keys, options.Ranking(ranking.Options{PriorWeight: 0})) // score = plain mean
	e.ord.Hooks.PaidChanged = rank.PaidChanged
	e.item("A", 10, 4)
	for _, u := range []string{"alice", "bob", "carol"} {
		if _, err := e.ord.Pay(e.ctx, u, e.buy("A", u, 1).ID); err != nil {
			t.Fatal(err)
		}
	}
	// In this order: the record lists (and restore replays) alice's rating before bob's.
	for _, u := range []string{"alice", "bob"} {
		if _, err := rank.Rate(e.ctx, "A", "c", u, map[string]int{"alice": 4, "bob": 2}[u]); err != nil {
			t.Fatal(err)
		}
	}
	e.drain()
	e.recordHas("A", map[string]int{"alice": 4, "bob": 2})
	if err := rdb.FlushDB(e.ctx).Err(); err != nil { // a private server: losing it is the test
		t.Fatal(err)
	}
	return e, rank
}

// recordHas checks the record's ratings of an item (user -> stars).
func (e *env) recordHas(item string, want map[string]int) {
	e.t.Helper()
	rs, err := e.rec.Ratings(e.ctx, item)
	if err != nil {
		e.t.Fatal(err)
	}
	got := map[string]int{}
	for _, r := range rs {
		got[r.User] = r.Stars
	}
	if !maps.Equal(got, want) {
		e.t.Errorf("record: %s's ratings are %v, want %v", item, got, want)
	}
}

// ratingsAre checks an item's ratings in Redis (user -> stars), its count and sum, and its
// score on the top-rated board (the plain mean: the store's prior weight is 0).
func (e *env) ratingsAre(rank *ranking.Store, item string, want map[string]int) {
	e.t.Helper()
	got := map[string]int{}
	for u, s := range e.rdb.HGetAll(e.ctx, e.keys.ItemRatings(item)).Val() {
		got[u], _ = strconv.Atoi(s)
	}
	if !maps.Equal(got, want) {
		e.t.Errorf("redis: %s's ratings are %v, want %v", item, got, want)
	}
	var sum int64
	for _, s := range want {
		sum += int64(s)
	}
	stats := e.rdb.HGetAll(e.ctx, e.keys.ItemRatingStats(item)).Val()
	if num(stats["count"]) != int64(len(want)) || num(stats["sum"]) != sum {
		e.t.Errorf("redis: %s's stats %v, want count %d sum %d", item, stats, len(want), sum)
	}
	top, err := rank.TopRated(e.ctx, "c", 10)
	mean := float64(sum) / float64(len(want))
	if err != nil || len(top) != 1 || top[0].ItemID != item || top[0].Score != mean {
		e.t.Errorf("top-rated in c: %v %v, want %s at %v", top, err, item, mean)
	}
}

// TestRestoreKeepsLiveRating: the item is on sale while restore replays its recorded ratings.
// Bob re-rates 5 after alice's rating was replayed and before his recorded 2 is: a replay only
// fills in ratings Redis lacks (else his 5, the mean and the board would go back to 2), and
// emits nothing, since the record already holds them.
func TestRestoreKeepsLiveRating(t *testing.T) {
	e, rank := ratedEnv(t)
	var live ranking.Rating
	var liveErr error
	rated := false
	opt := reconcile.Options{Ranking: rank, QuietFor: 10 * time.Millisecond, ReservationTTL: time.Hour}
	reconcile.SetAfterRating(&opt, func(ctx context.Context, item, user string) {
		if user == "alice" && !rated {
			rated = true
			live, liveErr = rank.Rate(ctx, item, "c", "bob", 5)
		}
	})
	res, err := e.reconciler(opt).Restore(e.ctx, reconcile.RestoreOptions{Items: []string{"A"}})
	if err != nil || len(res.Restored) != 1 {
		t.Fatalf("restore: %+v %v", res, err)
	}
	if !rated || liveErr != nil || live.Count != 2 || live.Average != 4.5 {
		t.Fatalf("bob's live rating (hook ran %v): %+v %v, want count 2 average 4.5", rated, live, liveErr)
	}
	want := map[string]int{"alice": 4, "bob": 5}
	e.ratingsAre(rank, "A", want)
	if got := res.Restored[0].Ratings; got != 1 {
		t.Errorf("restore reports %d ratings restored, want 1 (alice's; bob's was live)", got)
	}
	e.drain()
	e.recordHas("A", want)
}

// TestRestoreReplaysRatingsBesideLiveOne: carol rates the item once it is on sale again, before
// the replay begins. Every missing rating is still replayed beside the live one: skipping an
// item with any rating would lose the others for good (every later restore skips them too).
func TestRestoreReplaysRatingsBesideLiveOne(t *testing.T) {
	e, rank := ratedEnv(t)
	var liveErr error
	rated := false
	opt := reconcile.Options{Ranking: rank, QuietFor: 10 * time.Millisecond, ReservationTTL: time.Hour}
	reconcile.SetBeforeRatings(&opt, func(ctx context.Context, item string) {
		rated = true
		_, liveErr = rank.Rate(ctx, item, "c", "carol", 3)
	})
	res, err := e.reconciler(opt).Restore(e.ctx, reconcile.RestoreOptions{Items: []string{"A"}})
	if err != nil || len(res.Restored) != 1 {
		t.Fatalf("restore: %+v %v", res, err)
	}
	if !rated || liveErr != nil {
		t.Fatalf("carol's live rating (hook ran %v): %v", rated, liveErr)
	}
	want := map[string]int{"alice": 4, "bob": 2, "carol": 3}
	e.ratingsAre(rank, "A", want)
	if got := res.Restored[0].Ratings; got != 2 {
		t.Errorf("restore reports %d ratings restored, want 2 (alice's and bob's)", got)
	}
	e.drain()
	e.recordHas("A", want)
}
