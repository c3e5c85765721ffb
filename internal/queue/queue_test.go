package queue_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/queue"
	"github.com/flashsale/flashsale/internal/testing/options"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// room is one test's waiting rooms over the real Redis (own key prefix).
type room struct {
	t    testing.TB
	rdb  redis.UniversalClient
	keys keyspace.Space
	inv  *inventory.Store
	q    *queue.Store
}

var testSecret = []byte("a waiting-room test secret of 32+ bytes")

func newRoom(t testing.TB) *room {
	t.Helper()
	rdb, keys := testenv.Redis(t)
	return roomOn(t, rdb, keys)
}

// roomOn builds another api instance's stores over the same Redis and key space.
func roomOn(t testing.TB, rdb redis.UniversalClient, keys keyspace.Space) *room {
	signer, err := queue.NewSigner(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	inv := inventory.NewStore(rdb, keys, options.Inventory(inventory.Options{}))
	return &room{t: t, rdb: rdb, keys: keys, inv: inv, q: queue.NewStore(rdb, keys, signer, inv, options.Queue(queue.Options{}))}
}

// item creates or updates an item with a waiting room; starts is relative to now (0: none).
func (r *room) item(id string, stock int64, q inventory.QueueSettings, starts time.Duration) {
	r.t.Helper()
	in := inventory.Input{ID: id, Name: "Item " + id, PriceCents: 100, PerUserLimit: 5, Queue: &q}
	if starts != 0 {
		at := time.Now().Add(starts).UTC()
		in.StartsAt = &at
	}
	in.Stock = &stock
	if it, err := r.inv.Get(context.Background(), id); err == nil {
		in.Stock = &it.StockTotal
	}
	if _, _, err := r.inv.Upsert(context.Background(), in); err != nil {
		r.t.Fatalf("upsert %s: %v", id, err)
	}
}

// tickets reads every ticket of an item from Redis: user -> packed fields.
type rawTicket struct {
	state byte
	line  int64
}

func (r *room) tickets(item string) (map[string]rawTicket, int64) {
	r.t.Helper()
	ctx := context.Background()
	k := r.keys.Item(item)
	h, err := r.rdb.HGetAll(ctx, k.QueueTickets()).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]rawTicket{}
	for u, v := range h {
		if strings.HasPrefix(u, "#") {
			continue
		}
		f := strings.Split(v, "|")
		line, _ := strconv.ParseInt(f[1], 10, 64)
		out[u] = rawTicket{state: f[0][0], line: line}
	}
	popped, _ := r.rdb.HGet(ctx, k.QueueState(), "popped").Int64()
	return out, popped
}

// admitSome runs admission steps until one admits somebody (the rate's token bucket starts
// empty and fills with time), failing after a deadline.
func (r *room) admitSome(item string) queue.AdmitResult {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		res, err := r.q.Admit(context.Background(), item, time.Time{})
		if err != nil {
			r.t.Fatal(err)
		}
		if res.AdmittedNow > 0 {
			return res
		}
		time.Sleep(5 * time.Millisecond) // let the bucket fill; the loop's condition is the sync
	}
	r.t.Fatalf("%s: nobody admitted before the deadline", item)
	return queue.AdmitResult{}
}

var wide = inventory.QueueSettings{AdmitPerSecond: 100000, MaxActive: 1000000, PassTTLSeconds: 600}

func TestJoinOutcomes(t *testing.T) {
	r := newRoom(t)
	ctx := context.Background()
	r.item("q", 10, wide, 0)
	a, err := r.q.Join(ctx, "q", "alice")
	if err != nil || a.State != queue.StateWaiting || a.Position != 1 || a.Token == "" {
		t.Fatalf("join: %+v %v", a, err)
	}
	again, err := r.q.Join(ctx, "q", "alice")
	if err != nil || again.Position != 1 || again.State != a.State {
		t.Fatalf("joining again: %+v %v", again, err)
	}
	b, _ := r.q.Join(ctx, "q", "bob")
	if b.Position != 2 {
		t.Fatalf("second shopper: %+v", b)
	}
	if _, err := r.q.Join(ctx, "nope", "alice"); !errors.Is(err, inventory.ErrNotFound) {
		t.Errorf("unknown item: %v", err)
	}
	if _, _, err := r.inv.Upsert(ctx, inventory.Input{ID: "plain", Name: "P", PriceCents: 1, PerUserLimit: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.q.Join(ctx, "plain", "alice"); !errors.Is(err, queue.ErrNoQueue) {
		t.Errorf("item without a waiting room: %v", err)
	}
	if _, err := r.q.Read(ctx, "q", "carol"); !errors.Is(err, queue.ErrNotJoined) {
		t.Errorf("read before joining: %v", err)
	}
	end := time.Now().Add(-time.Second).UTC()
	start := end.Add(-time.Hour)
	// Created to end in the future, its end moved back in Redis as time passing would, then
	// written again unchanged (a past ends_at may stay).
	later := end.Add(2 * time.Hour)
	over := inventory.Input{ID: "over", Name: "O", PriceCents: 1, PerUserLimit: 1, StartsAt: &start, EndsAt: &later, Queue: &wide}
	if _, _, err := r.inv.Upsert(ctx, over); err != nil {
		t.Fatal(err)
	}
	r.rdb.HSet(ctx, r.keys.Item("over").Hash(), "ends_at", end.UnixMilli())
	over.EndsAt = &end
	if _, _, err := r.inv.Upsert(ctx, over); err != nil {
		t.Fatal(err)
	}
	if _, err := r.q.Join(ctx, "over", "alice"); !errors.Is(err, inventory.ErrSaleEnded) {
		t.Errorf("join after the end: %v", err)
	}
}

// TestConcurrentJoinsAndAdmission: 5,000 shoppers join at once after the start: their line
// numbers are exactly 1..5000. Then admission steps run, and after each one the invariants
// hold: waiting positions are exactly 1..W, nobody's position grew, the admitted are a prefix
// of the line (zero inversions), live passes <= max_active and <= stock left.
func TestConcurrentJoinsAndAdmission(t *testing.T) {
	r := newRoom(t)
	ctx := context.Background()
	const n = 5000
	settings := inventory.QueueSettings{AdmitPerSecond: 100000, MaxActive: 700, PassTTLSeconds: 600}
	r.item("hot", 100000, settings, 0)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.q.Join(ctx, "hot", "u"+strconv.Itoa(i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	tk, _ := r.tickets("hot")
	lines := make([]int64, 0, n)
	for _, x := range tk {
		lines = append(lines, x.line)
	}
	sort.Slice(lines, func(a, b int) bool { return lines[a] < lines[b] })
	for i, l := range lines {
		if l != int64(i+1) {
			t.Fatalf("line numbers are not 1..%d: the %d-th is %d", n, i+1, l)
		}
	}

	last := map[string]int64{}
	k := r.keys.Item("hot")
	for step := 0; ; step++ {
		res, err := r.q.Admit(ctx, "hot", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		tk, popped := r.tickets("hot")
		var waiting []int64
		maxAdmitted, minWaiting := int64(0), int64(math.MaxInt64)
		for u, x := range tk {
			if x.state == 'w' {
				pos := x.line - popped
				waiting = append(waiting, pos)
				if prev, ok := last[u]; ok && pos > prev {
					t.Fatalf("step %d: %s's position grew from %d to %d", step, u, prev, pos)
				}
				last[u] = pos
				minWaiting = min(minWaiting, x.line)
			} else {
				maxAdmitted = max(maxAdmitted, x.line)
			}
		}
		sort.Slice(waiting, func(a, b int) bool { return waiting[a] < waiting[b] })
		for i, p := range waiting {
			if p != int64(i+1) {
				t.Fatalf("step %d: waiting positions are not 1..%d", step, len(waiting))
			}
		}
		if len(waiting) > 0 && maxAdmitted > minWaiting {
			t.Fatalf("step %d: line %d admitted while line %d waits", step, maxAdmitted, minWaiting)
		}
		if res.Live > settings.MaxActive || res.Live > res.StockLeft {
			t.Fatalf("step %d: %d live passes (max_active %d, stock left %d)", step, res.Live, settings.MaxActive, res.StockLeft)
		}
		if step == 40 {
			break
		}
		time.Sleep(2 * time.Millisecond) // the bucket fills with time; the checks above are the test
		// Spend a third of the live passes by hand (as purchases would), so places free up.
		if step%2 == 0 {
			for u, x := range tk {
				if x.state == 'a' && x.line%3 == 0 {
					v := r.rdb.HGet(ctx, k.QueueTickets(), u).Val()
					r.rdb.HSet(ctx, k.QueueTickets(), u, "s"+v[1:])
					r.rdb.HIncrBy(ctx, k.QueueTickets(), "#spent", 1)
				}
			}
		}
	}
	tk, popped := r.tickets("hot")
	if w := r.rdb.ZCard(ctx, k.QueueLine()).Val(); w == 0 || popped <= settings.MaxActive {
		t.Fatalf("%d admitted, %d waiting: the steps did not reach and pass max_active", popped, w)
	}

	// The record learns every join and admission from the outbox, once per shopper, in the
	// same calls that made them.
	joined, admitted := map[string]int{}, map[string]int{}
	for _, e := range testenv.StreamEvents(t, r.rdb, k.Outbox()) {
		switch e.Type {
		case events.QueueJoined:
			joined[e.UserID]++
		case events.QueueAdmitted:
			admitted[e.UserID]++
		}
	}
	if len(joined) != n {
		t.Errorf("queue.joined events name %d shoppers, want %d", len(joined), n)
	}
	for u, c := range joined {
		if c != 1 {
			t.Errorf("%s: %d queue.joined events, want 1", u, c)
		}
	}
	if int64(len(admitted)) != popped {
		t.Errorf("queue.admitted events name %d shoppers, %d were admitted", len(admitted), popped)
	}
	for u, c := range admitted {
		if x, ok := tk[u]; c != 1 || !ok || x.state == 'w' {
			t.Errorf("%s: %d queue.admitted events, ticket %+v", u, c, x)
		}
	}
}

// TestRateAndTwoInstances: two api instances tick the same line concurrently; in every
// sliding second of Redis time at most admit_per_second passes are issued, no shopper is
// admitted twice, and the admitted are a prefix of the line.
func TestRateAndTwoInstances(t *testing.T) {
	r := newRoom(t)
	other := roomOn(t, r.rdb, r.keys)
	ctx := context.Background()
	const rate = 40
	r.item("rl", 100000, inventory.QueueSettings{AdmitPerSecond: rate, MaxActive: 100000, PassTTLSeconds: 600}, 0)
	for i := range 400 {
		if _, err := r.q.Join(ctx, "rl", fmt.Sprintf("u%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	type admission struct {
		at time.Time
		n  int64
	}
	var mu sync.Mutex
	var log []admission
	deadline := time.Now().Add(2500 * time.Millisecond)
	var wg sync.WaitGroup
	for _, s := range []*queue.Store{r.q, other.q} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				res, err := s.Admit(ctx, "rl", time.Time{})
				if err != nil {
					t.Error(err)
					return
				}
				if res.AdmittedNow > 0 {
					mu.Lock()
					log = append(log, admission{res.At, res.AdmittedNow})
					mu.Unlock()
				}
				time.Sleep(20 * time.Millisecond) // a tick, not synchronisation
			}
		}()
	}
	wg.Wait()
	var total int64
	for _, a := range log {
		total += a.n
		var inSecond int64
		for _, b := range log {
			if !b.at.Before(a.at) && b.at.Sub(a.at) < time.Second {
				inSecond += b.n
			}
		}
		if inSecond > rate {
			t.Fatalf("%d passes within one second from %v (rate %d)", inSecond, a.at, rate)
		}
	}
	if total == 0 {
		t.Fatal("nobody was admitted")
	}
	tk, popped := r.tickets("rl")
	if popped != total {
		t.Fatalf("the line's head is %d, the steps admitted %d", popped, total)
	}
	for u, x := range tk {
		if (x.state == 'a') != (x.line <= popped) {
			t.Fatalf("%s (line %d, state %c) breaks the prefix of %d admitted", u, x.line, x.state, popped)
		}
	}
}

// TestPreStartShuffleIsFair: shoppers who join before the start in a known order land in a
// uniformly random order (chi-squared over join index x rank across many trials) that is
// uncorrelated with the join order (mean Spearman rho about 0).
func TestPreStartShuffleIsFair(t *testing.T) {
	r := newRoom(t)
	ctx := context.Background()
	const trials, n = 300, 10
	var counts [n][n]int
	var rhoSum float64
	for trial := range trials {
		id := "f" + strconv.Itoa(trial)
		r.item(id, 1000, wide, time.Hour)
		for i := range n {
			tk, err := r.q.Join(ctx, id, "s"+strconv.Itoa(i))
			if err != nil || tk.Position != 0 {
				t.Fatalf("pre-start join: %+v %v", tk, err)
			}
		}
		// The start: move it into the past and let one admission step number the group.
		if _, _, err := r.inv.Upsert(ctx, inventory.Input{ID: id, Name: "F", PriceCents: 100, PerUserLimit: 5,
			Queue: &inventory.QueueSettings{AdmitPerSecond: 1, MaxActive: 1, PassTTLSeconds: 600}}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.q.Admit(ctx, id, time.Time{}); err != nil {
			t.Fatal(err)
		}
		tk, _ := r.tickets(id)
		var d2 float64
		for i := range n {
			x := tk["s"+strconv.Itoa(i)]
			if x.line < 1 || x.line > n {
				t.Fatalf("trial %d: s%d numbered %d", trial, i, x.line)
			}
			counts[i][x.line-1]++
			d := float64(i + 1 - int(x.line))
			d2 += d * d
		}
		rhoSum += 1 - 6*d2/float64(n*(n*n-1))
	}
	var chi2 float64
	exp := float64(trials) / n
	for i := range n {
		for j := range n {
			d := float64(counts[i][j]) - exp
			chi2 += d * d / exp
		}
	}
	// df = (n-1)^2 = 81: mean 81, sd 12.7. 160 is beyond p = 1e-6: a fair shuffle fails it
	// about once in a million runs; a biased one (e.g. join order kept) scores in the thousands.
	if chi2 > 160 {
		t.Errorf("ranks are not uniform: chi2 = %.1f (df 81)", chi2)
	}
	// Mean rho over 300 trials of 10 has sd 1/3/sqrt(300) = 0.019: 0.1 is over 5 sd.
	if rho := rhoSum / trials; math.Abs(rho) > 0.1 {
		t.Errorf("order correlates with join order: mean Spearman rho = %.3f", rho)
	}
	t.Logf("chi2 = %.1f (df 81), mean Spearman rho = %.4f", chi2, rhoSum/trials)
}

// TestPostStartFollowsAcceptedJoins: after the start, a shopper whose join was answered
// before another's was sent is ahead of them.
func TestPostStartFollowsAcceptedJoins(t *testing.T) {
	r := newRoom(t)
	ctx := context.Background()
	r.item("fifo", 1000, wide, 0)
	const n = 300
	type join struct {
		user       string
		sent, done time.Time
	}
	joins := make([]join, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := i; j < n; j += 30 { // 30 goroutines join in waves
				if j%30 != i {
					return
				}
				u := "p" + strconv.Itoa(j)
				sent := time.Now()
				if _, err := r.q.Join(ctx, "fifo", u); err != nil {
					t.Error(err)
				}
				joins[j] = join{u, sent, time.Now()}
			}
		}()
	}
	wg.Wait()
	tk, _ := r.tickets("fifo")
	for _, a := range joins {
		for _, b := range joins {
			if a.done.Before(b.sent) && tk[a.user].line >= tk[b.user].line {
				t.Fatalf("%s answered before %s was sent, yet is behind (%d vs %d)", a.user, b.user, tk[a.user].line, tk[b.user].line)
			}
		}
	}
}

// TestPollsFromMemoryAndSoldOut: a poll with the token is answered without Redis, its
// position never grows; when the item sells out (nothing reserved) waiting tickets say
// sold_out on the next step; no pass is issued while no stock is left.
func TestPollsFromMemoryAndSoldOut(t *testing.T) {
	r := newRoom(t)
	ctx := context.Background()
	r.item("m", 1, inventory.QueueSettings{AdmitPerSecond: 1000, MaxActive: 10, PassTTLSeconds: 600}, 0)
	a, _ := r.q.Join(ctx, "m", "a")
	b, _ := r.q.Join(ctx, "m", "b")
	c, _ := r.q.Join(ctx, "m", "c")
	r.admitSome("m")
	// One unit: one pass, however many wait.
	admitted, err := r.q.Poll(ctx, "m", "a", a.Token)
	if err != nil || admitted.State != queue.StateAdmitted || admitted.Pass == "" {
		t.Fatalf("a: %+v %v", admitted, err)
	}
	before := r.q.PollsFromRedis.Load()
	p, err := r.q.Poll(ctx, "m", "c", c.Token)
	if err != nil || p.State != queue.StateWaiting || p.Position != 2 {
		t.Fatalf("c from memory: %+v %v", p, err)
	}
	if r.q.PollsFromRedis.Load() != before {
		t.Fatal("a poll with a token went to Redis")
	}
	// Another shopper's token, or another item's, is not answered from memory.
	if p, err := r.q.Poll(ctx, "m", "b", c.Token); err != nil || p.Position != 1 || r.q.PollsFromRedis.Load() != before+1 {
		t.Fatalf("b with c's token: %+v %v", p, err)
	}
	// Sell the unit and pay it: nothing can come back, so the line is sold out.
	if _, err := r.inv.AdjustStock(ctx, "m", -1); err != nil {
		t.Fatal(err)
	}
	res, err := r.q.Admit(ctx, "m", time.Time{})
	if err != nil || res.Status != "sold_out" || res.AdmittedNow != 0 {
		t.Fatalf("after the last unit: %+v %v", res, err)
	}
	if p, _ := r.q.Poll(ctx, "m", "b", b.Token); p.State != queue.StateSoldOut || p.Position != 0 {
		t.Fatalf("b after the sell-out: %+v", p)
	}
	// a still holds a live pass, but it can buy nothing: a is told to stop waiting too.
	if p, _ := r.q.Poll(ctx, "m", "a", admitted.Token); p.State != queue.StateSoldOut || p.Pass != "" {
		t.Fatalf("a's live pass after the sell-out: %+v", p)
	}
}

// TestExpiryFreesPlaceAndNoPassWithoutStock: an unused pass that expires frees its place (the
// ticket says expired, the next shopper is admitted); while stock_left is 0 with units still
// reserved (the line is live, not sold out) no step admits anyone; a unit coming back admits
// the next shopper.
func TestExpiryFreesPlaceAndNoPassWithoutStock(t *testing.T) {
	r := newRoom(t)
	ctx := context.Background()
	r.item("x", 1, inventory.QueueSettings{AdmitPerSecond: 1000, MaxActive: 1, PassTTLSeconds: 1}, 0)
	for _, u := range []string{"a", "b", "c"} {
		if _, err := r.q.Join(ctx, "x", u); err != nil {
			t.Fatal(err)
		}
	}
	r.admitSome("x")
	// a's pass lives a second; the step that clears it admits b into the freed place.
	deadline := time.Now().Add(5 * time.Second)
	var b queue.Ticket
	for b.State != queue.StateAdmitted {
		if time.Now().After(deadline) {
			t.Fatalf("b was not admitted after a's pass expired: %+v", b)
		}
		time.Sleep(20 * time.Millisecond) // waiting on b's state, with a deadline
		if _, err := r.q.Admit(ctx, "x", time.Time{}); err != nil {
			t.Fatal(err)
		}
		b, _ = r.q.Read(ctx, "x", "b")
	}
	if a, _ := r.q.Read(ctx, "x", "a"); a.State != queue.StateExpired {
		t.Fatalf("a after the expiry: %+v", a)
	}
	id, err := r.q.CheckPass(b.Pass, "x", "b", false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.inv.Purchase(ctx, inventory.PurchaseRequest{ItemID: "x", UserID: "b", Quantity: 1, QueuePass: id}); err != nil {
		t.Fatalf("b buys with the pass: %v", err)
	}
	// No unit left, one reserved (it may come back): steps run, nobody is admitted.
	for step := range 10 {
		res, err := r.q.Admit(ctx, "x", time.Time{})
		if err != nil || res.Status != "live" || res.AdmittedNow != 0 || res.StockLeft != 0 {
			t.Fatalf("step %d with no stock left: %+v %v", step, res, err)
		}
		time.Sleep(20 * time.Millisecond) // let the rate's bucket refill: it must not matter
	}
	if _, err := r.inv.AdjustStock(ctx, "x", 1); err != nil {
		t.Fatal(err)
	}
	if res := r.admitSome("x"); res.AdmittedNow != 1 {
		t.Fatalf("after a unit came back: %+v", res)
	}
	if c, _ := r.q.Read(ctx, "x", "c"); c.State != queue.StateAdmitted {
		t.Fatalf("c: %+v", c)
	}
}
