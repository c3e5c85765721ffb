package outbox_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/outbox"
)

// TestRelayIndexesOrders: an api whose blind writes of the users' order indexes were lost
// loses no entry: the relay writes them from the order events before the events leave Redis,
// and while it cannot (Options.Events fails) the events stay.
func TestRelayIndexesOrders(t *testing.T) {
	e := newEnv(t, "a", "b", "c")
	e.sell(300, 6)
	ctx := context.Background()
	users := map[string]bool{}
	want := map[string][]string{} // user -> the items they have orders of
	for _, it := range e.items {
		all, err := e.rdb.HGetAll(ctx, e.keys.Item(it).Orders()).Result()
		if err != nil {
			t.Fatal(err)
		}
		for id, packed := range all {
			o, err := orders.Unpack(id, it, packed)
			if err != nil {
				t.Fatal(err)
			}
			users[o.UserID] = true
			if !slices.Contains(want[o.UserID], it) {
				want[o.UserID] = append(want[o.UserID], it)
			}
		}
	}
	for u := range users {
		e.rdb.Del(ctx, e.keys.UserOrderIndex(u)) // the blind writes were lost
	}

	down := errors.New("the users' slots are unreachable")
	failing, _ := e.relay(outbox.Options{Consumer: "failing", Events: func(context.Context, []events.Event) error { return down }})
	stop, _ := start(t, failing)
	deadline := time.Now().Add(30 * time.Second)
	for failing.Stats().Failures < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the relay whose index writes fail did not try twice")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if e.backlog() == 0 || failing.Stats().Published != 0 {
		t.Fatalf("entries were published (%d events) without their orders indexed", failing.Stats().Published)
	}

	index := orders.NewIndex(e.rdb, e.keys)
	heir, _ := e.relay(outbox.Options{Consumer: "heir", Events: index.Changed,
		ClaimIdle: 200 * time.Millisecond, ClaimInterval: 50 * time.Millisecond})
	start(t, heir)
	e.waitDrained()
	for u := range users {
		items, err := e.rdb.HKeys(ctx, e.keys.UserOrderIndex(u)).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(items)
		slices.Sort(want[u])
		if !slices.Equal(items, want[u]) {
			t.Errorf("%s's index names items %v, the user has orders of %v", u, items, want[u])
		}
	}
}
