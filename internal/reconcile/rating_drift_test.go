package reconcile_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/ranking"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/testing/options"
)

// rate has each user buy, pay for and rate item (user -> stars).
func (e *env) rate(rank *ranking.Store, item string, stars map[string]int) {
	e.t.Helper()
	for _, u := range slices.Sorted(maps.Keys(stars)) {
		if _, err := e.ord.Pay(e.ctx, u, e.buy(item, u, 1).ID); err != nil {
			e.t.Fatal(err)
		}
		if _, err := rank.Rate(e.ctx, item, "c", u, stars[u]); err != nil {
			e.t.Fatal(err)
		}
	}
}

// A rating the record holds with other stars, has lost, or holds although Redis has none is
// drift, one per user; repair does not touch ratings and says so.
func TestRatingDrift(t *testing.T) {
	e := newEnv(t)
	rank := ranking.NewStore(e.rdb, e.keys, options.Ranking(ranking.Options{}))
	e.item("A", 100, 10)
	e.item("B", 100, 10)
	e.rate(rank, "A", map[string]int{"alice": 4, "bob": 2, "carol": 5})
	e.rate(rank, "B", map[string]int{"alice": 3})
	e.drain()
	e.exec(`UPDATE ratings SET stars = 1 WHERE item_id = 'A' AND user_id = 'alice'`)
	e.exec(`DELETE FROM ratings WHERE item_id = 'A' AND user_id = 'carol'`)
	e.exec(`INSERT INTO ratings (item_id, user_id, stars, updated_at) VALUES ('A', 'dave', 3, now())`)

	rep, err := e.reconciler(reconcile.Options{}).Batch(e.ctx, reconcile.BatchOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range rep.Drift {
		got = append(got, d.Kind+" "+d.ItemID+" "+d.UserID+" "+d.Redis+" "+d.Postgres)
	}
	want := []string{"rating A alice 4 1", "rating A carol 5 ", "rating A dave  3"}
	if !slices.Equal(got, want) || len(rep.Unverified) != 0 {
		t.Fatalf("drift\n got %q\nwant %q\nunverified %+v", got, want, rep.Unverified)
	}
	if rep.Repair == nil || len(rep.Repair.NotFixed) != len(want) || rep.Repair.Reemitted != 0 || !rep.DriftRemains() {
		t.Fatalf("repair %+v", rep.Repair)
	}
}

// Ratings whose rating.set events are still in the ranking outbox when the batch compares are
// candidates, not drift: the batch waits until the record has applied them (the pipeline is
// started only once the batch has taken its snapshots), then finds nothing. With the pipeline
// stopped throughout, they are unverified, never drift.
func TestRatingsInFlightNoDrift(t *testing.T) {
	e := newEnv(t)
	rank := ranking.NewStore(e.rdb, e.keys, options.Ranking(ranking.Options{}))
	e.item("A", 100, 10)
	e.item("B", 100, 10)
	e.rate(rank, "A", map[string]int{"alice": 4, "bob": 2})
	for _, p := range [][2]string{{"A", "carol"}, {"B", "alice"}} {
		if _, err := e.ord.Pay(e.ctx, p[1], e.buy(p[0], p[1], 1).ID); err != nil {
			t.Fatal(err)
		}
	}
	e.drain()
	e.stopPipeline()
	// In Redis only (only ratings in flight): changed ratings, a new one, a rating of an item
	// the record has no rating of.
	for _, r := range []struct {
		item, user string
		stars      int
	}{{"A", "alice", 1}, {"A", "bob", 5}, {"A", "bob", 3}, {"A", "carol", 5}, {"B", "alice", 2}} {
		if _, err := rank.Rate(e.ctx, r.item, "c", r.user, r.stars); err != nil {
			t.Fatal(err)
		}
	}

	stuck, err := e.reconciler(reconcile.Options{SettleTimeout: time.Second}).Batch(e.ctx, reconcile.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, u := range stuck.Unverified {
		for _, x := range u.Users {
			users = append(users, u.ItemID+" "+x)
		}
	}
	if want := []string{"A alice", "A bob", "A carol", "B alice"}; len(stuck.Drift) != 0 || !slices.Equal(users, want) {
		t.Fatalf("pipeline stopped: drift %+v unverified %q, want none and %q", stuck.Drift, users, want)
	}

	opt := reconcile.Options{}
	reconcile.SetBeforeSettle(&opt, func(context.Context) { e.startPipeline() })
	rep, err := e.reconciler(opt).Batch(e.ctx, reconcile.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Drift) != 0 || len(rep.Unverified) != 0 || rep.Candidates == 0 {
		t.Fatalf("ratings in flight: %d candidates, drift %+v unverified %+v", rep.Candidates, rep.Drift, rep.Unverified)
	}
}
