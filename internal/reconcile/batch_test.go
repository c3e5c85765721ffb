package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/lock"
	"github.com/flashsale/flashsale/internal/reconcile"
	"github.com/flashsale/flashsale/internal/record"
)

// A sale that reached Postgres whole: nothing to report.
func TestCleanSale(t *testing.T) {
	e := newEnv(t)
	e.item("A", 50, 5)
	e.item("B", 50, 5)
	for i := 0; i < 10; i++ {
		o := e.buy("A", "u"+string(rune('a'+i)), 2)
		if i%2 == 0 {
			if _, err := e.ord.Pay(e.ctx, o.UserID, o.ID); err != nil {
				t.Fatal(err)
			}
		}
		e.buy("B", "v"+string(rune('a'+i)), 1)
	}
	e.drain()
	rep, err := e.reconciler(reconcile.Options{}).Batch(e.ctx, reconcile.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || rep.Items != 2 || rep.Orders != 20 {
		t.Fatalf("report %+v", rep)
	}
	latest, err := e.rec.Latest(e.ctx)
	if err != nil || latest == nil || latest.ID != rep.RunID || latest.Status != "ok" || latest.FencingToken != rep.FencingToken {
		t.Fatalf("latest %+v %v; want run %d", latest, err, rep.RunID)
	}
}

// Each kind of drift the record can suffer is named exactly; --repair fixes it through the
// outbox; the next run finds nothing.
func TestDriftRepaired(t *testing.T) {
	e := newEnv(t)
	e.item("A", 100, 10)
	e.item("B", 100, 10)
	cancelled := e.buy("A", "alice", 2)
	if _, err := e.ord.Cancel(e.ctx, "alice", cancelled.ID); err != nil {
		t.Fatal(err)
	}
	paid := e.buy("A", "bob", 3)
	if _, err := e.ord.Pay(e.ctx, "bob", paid.ID); err != nil {
		t.Fatal(err)
	}
	reserved := e.buy("B", "carol", 1)
	e.buy("B", "dave", 4)
	e.drain()

	// Inject drift into the record.
	e.exec(`DELETE FROM orders WHERE id = $1`, cancelled.ID)                // order missing
	e.exec(`UPDATE orders SET status = 'reserved' WHERE id = $1`, paid.ID)  // status behind
	e.exec(`DELETE FROM orders WHERE id = $1`, reserved.ID)                 // missing, counts in reserved
	e.exec(`UPDATE items SET stock_total = stock_total + 7 WHERE id = 'B'`) // stock counter off
	e.exec(`DELETE FROM items WHERE id = 'A'`)                              // item missing
	// ... and into Redis: an item Postgres never heard of (written without its event).
	e.rdb.HSet(e.ctx, e.keys.Item("C").Hash(), "name", "ghost", "category", "c", "price_cents", 1,
		"stock_total", 5, "stock_left", 5, "reserved", 0, "paid", 0, "per_user_limit", 1,
		"starts_at", 0, "ends_at", 0, "seq", 0, "version", 1)
	e.rdb.SAdd(e.ctx, e.keys.Catalog(), "C")

	rec := e.reconciler(reconcile.Options{})
	rep, err := rec.Batch(e.ctx, reconcile.BatchOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"item_missing_in_postgres A  ",
		"item_missing_in_postgres C  ",
		"order_missing_in_postgres A " + cancelled.ID + " ",
		"order_missing_in_postgres B " + reserved.ID + " ",
		"order_status A " + paid.ID + " status",
		"stock_counter B  stock_total",
	}
	slices.Sort(want)
	got := driftKeys(rep.Drift)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("drift\n got %q\nwant %q", got, want)
	}
	if rep.Repair == nil || len(rep.Repair.Fixed) != len(want) || len(rep.Repair.NotFixed) != 0 {
		t.Fatalf("repair %+v", rep.Repair)
	}
	if rep.DriftRemains() { // `reconciler batch --repair` exits 0 on it, not 3
		t.Fatal("a repair that fixed everything it found says drift remains")
	}
	var sb strings.Builder
	rep.WriteTable(&sb)
	t.Logf("\n%s", sb.String())

	again, err := rec.Batch(e.ctx, reconcile.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Clean() {
		t.Fatalf("after repair: drift %q unverified %+v", driftKeys(again.Drift), again.Unverified)
	}
	if again.FencingToken <= rep.FencingToken {
		t.Fatalf("fencing %d after %d", again.FencingToken, rep.FencingToken)
	}
	var status string
	if err := e.db.QueryRow(e.ctx, `SELECT status FROM orders WHERE id = $1`, cancelled.ID).Scan(&status); err != nil || status != "cancelled" {
		t.Fatalf("re-emitted order: %q %v", status, err)
	}
}

// Drift that events cannot fix is named, and repair says why it left it.
func TestDriftNotFixable(t *testing.T) {
	e := newEnv(t)
	e.item("A", 100, 10)
	o1 := e.buy("A", "alice", 2)
	o2 := e.buy("A", "bob", 1)
	if _, err := e.ord.Pay(e.ctx, "bob", o2.ID); err != nil {
		t.Fatal(err)
	}
	e.drain()
	e.exec(`INSERT INTO orders (id, item_id, user_id, quantity, price_cents, status, created_at, updated_at)
		VALUES ('A.999', 'A', 'ghost', 1, 250, 'paid', now(), now())`) // an extra row
	e.exec(`UPDATE orders SET user_id = 'mallory' WHERE id = $1`, o1.ID)  // wrong user
	e.exec(`UPDATE orders SET status = 'cancelled' WHERE id = $1`, o2.ID) // final, but another
	e.rdb.HIncrBy(e.ctx, e.keys.Item("A").Hash(), "stock_left", -3)       // Redis counter off

	rep, err := e.reconciler(reconcile.Options{}).Batch(e.ctx, reconcile.BatchOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"order_missing_in_redis A A.999 ",
		"order_status A " + o2.ID + " status",
		"order_user A " + o1.ID + " user_id",
		"stock_counter A  stock_left",
	}
	slices.Sort(want)
	got := driftKeys(rep.Drift)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("drift\n got %q\nwant %q", got, want)
	}
	if len(rep.Repair.Fixed) != 0 || len(rep.Repair.NotFixed) != 4 || rep.Repair.Reemitted != 0 {
		t.Fatalf("repair %+v", rep.Repair)
	}
	if !rep.DriftRemains() { // `reconciler batch --repair` exits 3 on it
		t.Fatal("a repair that fixed nothing says no drift remains")
	}
	for _, n := range rep.Repair.NotFixed {
		if n.Reason == "" {
			t.Fatalf("no reason for %v", n.Drift)
		}
	}
	var n int
	_ = e.db.QueryRow(e.ctx, `SELECT count(*) FROM orders WHERE id = 'A.999'`).Scan(&n)
	if n != 1 {
		t.Fatal("repair deleted a row of the record")
	}
	latest, _ := e.rec.Latest(e.ctx)
	if latest == nil || latest.Status != "drift" {
		t.Fatalf("latest %+v", latest)
	}
}

// Purchases, payments and cancellations keep flowing while a batch runs: events in flight
// (outbox backlog, consumer lag) are waited for, never reported as drift.
func TestBusySaleNoDrift(t *testing.T) {
	e := newEnv(t)
	items := []string{"A", "B", "C"}
	for _, id := range items {
		e.item(id, 100000, 1000)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ops atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			user := "w" + string(rune('a'+w))
			for {
				select {
				case <-stop:
					return
				default:
				}
				o, ok := e.tryBuy(items[rng.IntN(len(items))], user, 1+rng.Int64N(2))
				if !ok {
					return
				}
				switch rng.IntN(3) {
				case 0:
					_, _ = e.ord.Pay(e.ctx, user, o.ID)
				case 1:
					_, _ = e.ord.Cancel(e.ctx, user, o.ID)
				}
				ops.Add(1)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	rec := e.reconciler(reconcile.Options{})
	done := make(chan struct{})
	var rep *reconcile.Report
	var err error
	go func() {
		defer close(done)
		rep, err = rec.Batch(e.ctx, reconcile.BatchOptions{})
	}()
	time.Sleep(1500 * time.Millisecond) // keep selling while the batch compares
	close(stop)
	wg.Wait()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d operations; batch: %d orders, %d candidates, %d rounds, in flight %+v",
		ops.Load(), rep.Orders, rep.Candidates, rep.Rounds, rep.InFlight)
	if len(rep.Drift) != 0 || len(rep.Unverified) != 0 {
		t.Fatalf("busy sale: drift %q unverified %+v", driftKeys(rep.Drift), rep.Unverified)
	}
	again, err := rec.Batch(e.ctx, reconcile.BatchOptions{})
	if err != nil || !again.Clean() {
		t.Fatalf("after the sale: %v %+v", err, again)
	}
}

// Two batches started together: one runs, the other is refused and told who holds the lock.
func TestTwoBatchesOneRuns(t *testing.T) {
	e := newEnv(t)
	e.item("A", 10, 1)
	e.drain()
	started := make(chan struct{})
	release := make(chan struct{})
	opt := reconcile.Options{}
	reconcile.SetAfterStart(&opt, func(context.Context) {
		close(started)
		<-release
	})
	first := e.reconciler(opt)
	second := e.reconciler(reconcile.Options{})
	var firstErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, firstErr = first.Batch(e.ctx, reconcile.BatchOptions{})
	}()
	waitStarted(t, started, done, &firstErr)
	_, err := second.Batch(e.ctx, reconcile.BatchOptions{})
	var held *lock.HeldError
	if !errors.Is(err, reconcile.ErrBusy) || !errors.As(err, &held) || held.Holder == "" {
		t.Fatalf("second batch: %v; want ErrBusy naming the holder", err)
	}
	t.Logf("refused: %v", err)
	close(release)
	<-done
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	var runs int
	_ = e.db.QueryRow(e.ctx, `SELECT count(*) FROM reconciliation_runs`).Scan(&runs)
	if runs != 1 {
		t.Fatalf("%d runs recorded; want 1", runs)
	}
}

// waitStarted waits until a batch run in the background reaches its afterStart hook, or
// fails the test if the batch ended before it (it closes done; *err is its error then):
// waiting on started alone would hang until the test binary's timeout.
func waitStarted(t *testing.T, started, done <-chan struct{}, err *error) {
	t.Helper()
	select {
	case <-started:
	case <-done:
		t.Fatalf("the batch ended before its run started: %v", *err)
	}
}

// A runner that stalls past its lock's TTL, while another takes over and finishes, cannot
// write its result afterwards: its fencing number is older.
func TestStalledRunnerFenced(t *testing.T) {
	e := newEnv(t)
	e.item("A", 10, 1)
	e.drain()
	started := make(chan struct{})
	release := make(chan struct{})
	opt := reconcile.Options{LockTTL: 200 * time.Millisecond}
	reconcile.SetAfterStart(&opt, func(context.Context) {
		close(started)
		<-release // a stop-the-world pause: nothing of this runner moves
	})
	stale := e.reconciler(opt)
	var staleErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, staleErr = stale.Batch(e.ctx, reconcile.BatchOptions{})
	}()
	waitStarted(t, started, done, &staleErr)
	// The stall outlives the TTL: the lock expires (its refresh loop is paused too).
	key, _ := e.keys.Lock(reconcile.LockName)
	e.rdb.Del(e.ctx, key)

	fresh, err := e.reconciler(reconcile.Options{}).Batch(e.ctx, reconcile.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	<-done
	if !errors.Is(staleErr, reconcile.ErrFenced) {
		t.Fatalf("stale runner: %v; want ErrFenced", staleErr)
	}
	latest, err := e.rec.Latest(e.ctx)
	if err != nil || latest.ID != fresh.RunID {
		t.Fatalf("latest %+v %v; want the fresh run %d", latest, err, fresh.RunID)
	}
	var status string
	_ = e.db.QueryRow(e.ctx, `SELECT status FROM reconciliation_runs WHERE fencing_token < $1`, fresh.FencingToken).Scan(&status)
	if status != record.RunAbandoned {
		t.Fatalf("stale run's row: status %q; want abandoned (closed by the fresh run, its own result refused)", status)
	}
}

// A runner killed mid-run (no result, no release) leaves its run running; the next run closes
// it as abandoned when it starts, and the report shows it until that run finishes. A start
// with an older fencing number cannot close the live run in turn.
func TestCrashedRunAbandoned(t *testing.T) {
	e := newEnv(t)
	crashCtx, crash := context.WithCancel(e.ctx)
	opt := reconcile.Options{}
	// The crash: the runner's goroutine ends once its start is recorded, as kill -9 ends its
	// process: nothing after that point runs.
	reconcile.SetAfterStart(&opt, func(context.Context) { runtime.Goexit() })
	crashed := make(chan struct{})
	go func() {
		defer close(crashed)
		_, _ = e.reconciler(opt).Batch(crashCtx, reconcile.BatchOptions{})
	}()
	<-crashed
	crash() // its lock refresh stops with the process
	key, _ := e.keys.Lock(reconcile.LockName)
	e.rdb.Del(e.ctx, key) // and the lock's TTL runs out
	var crashedID, crashedFence int64
	if err := e.db.QueryRow(e.ctx, `SELECT id, fencing_token FROM reconciliation_runs WHERE status = 'running'`).
		Scan(&crashedID, &crashedFence); err != nil {
		t.Fatalf("the crashed run's row: %v", err)
	}

	started := make(chan struct{})
	release := make(chan struct{})
	opt = reconcile.Options{}
	reconcile.SetAfterStart(&opt, func(context.Context) {
		close(started)
		<-release
	})
	var rep *reconcile.Report
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		rep, err = e.reconciler(opt).Batch(e.ctx, reconcile.BatchOptions{})
	}()
	waitStarted(t, started, done, &err)
	var liveID int64
	if err := e.db.QueryRow(e.ctx, `SELECT id FROM reconciliation_runs WHERE status = 'running'`).Scan(&liveID); err != nil {
		t.Fatalf("the live run: %v", err)
	}
	var status, errText string
	var finished bool
	_ = e.db.QueryRow(e.ctx, `SELECT status, finished_at IS NOT NULL, coalesce(error, '') FROM reconciliation_runs WHERE id = $1`,
		crashedID).Scan(&status, &finished, &errText)
	if status != record.RunAbandoned || !finished || !strings.Contains(errText, fmt.Sprintf("superseded by run %d", liveID)) {
		t.Fatalf("crashed run: status %q finished %v error %q; want abandoned, superseded by run %d", status, finished, errText, liveID)
	}
	if l, lerr := e.rec.Latest(e.ctx); lerr != nil || l == nil || l.ID != crashedID || l.Status != record.RunAbandoned {
		t.Fatalf("latest during the next run: %+v %v; want the abandoned run %d", l, lerr, crashedID)
	}
	// A runner that stalled between taking the lock and recording its start, with the older number.
	if _, serr := e.rec.StartRun(e.ctx, reconcile.LockName, crashedFence, time.Now()); !errors.Is(serr, reconcile.ErrFenced) {
		t.Fatalf("start with an older fencing number: %v; want ErrFenced", serr)
	}
	_ = e.db.QueryRow(e.ctx, `SELECT status FROM reconciliation_runs WHERE id = $1`, liveID).Scan(&status)
	if status != "running" {
		t.Fatalf("live run closed by an older start: status %q", status)
	}

	close(release)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if l, lerr := e.rec.Latest(e.ctx); lerr != nil || l == nil || l.ID != rep.RunID || l.Status != "ok" {
		t.Fatalf("latest after the next run: %+v %v; want run %d ok", l, lerr, rep.RunID)
	}
}

// The schedule runs batches on its own; two schedulers never overlap a run.
func TestSchedule(t *testing.T) {
	e := newEnv(t)
	e.item("A", 10, 1)
	e.drain()
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); e.reconciler(reconcile.Options{}).RunEvery(ctx, 30*time.Millisecond) }()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		_ = e.db.QueryRow(e.ctx, `SELECT count(*) FROM reconciliation_runs WHERE status = 'ok'`).Scan(&n)
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d scheduled runs", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	// Runs never overlapped: each started after the previous one finished.
	var overlaps int
	_ = e.db.QueryRow(e.ctx, `SELECT count(*) FROM reconciliation_runs a JOIN reconciliation_runs b
		ON a.id < b.id AND b.started_at < a.finished_at`).Scan(&overlaps)
	if overlaps != 0 {
		t.Fatalf("%d overlapping runs", overlaps)
	}
	// (The last run may have been cancelled by the test's end and recorded as failed.)
	var drift int
	_ = e.db.QueryRow(e.ctx, `SELECT count(*) FROM reconciliation_runs WHERE status = 'drift'`).Scan(&drift)
	if drift != 0 {
		t.Fatalf("%d runs found drift", drift)
	}
}

// The exit status of `reconciler batch`: drift remains unless nothing was found, or --repair
// fixed all it found; anything unverified always counts.
func TestDriftRemains(t *testing.T) {
	d := []reconcile.Drift{{Kind: "order_status"}, {Kind: "stock_counter"}}
	for _, c := range []struct {
		name string
		rep  reconcile.Report
		want bool
	}{
		{"clean", reconcile.Report{}, false},
		{"drift, no repair", reconcile.Report{Drift: d}, true},
		{"all repaired", reconcile.Report{Drift: d, Repair: &reconcile.Repair{Fixed: d}}, false},
		{"one not fixed", reconcile.Report{Drift: d, Repair: &reconcile.Repair{Fixed: d[:1], NotFixed: []reconcile.NotFixed{{Drift: d[1]}}}}, true},
		{"repaired, one unverified", reconcile.Report{Drift: d, Repair: &reconcile.Repair{Fixed: d}, Unverified: []reconcile.Unverified{{}}}, true},
	} {
		if got := c.rep.DriftRemains(); got != c.want {
			t.Errorf("%s: DriftRemains %v, want %v", c.name, got, c.want)
		}
	}
}

// A runner told to stop mid-run (the reconciler's SIGTERM) closes its own run as failed, with
// an error naming why it stopped, and releases the lock at once: the next runner does not wait
// for the lock's TTL, and finds no run left running.
func TestStoppedRunClosesItselfAndReleasesTheLock(t *testing.T) {
	e := newEnv(t)
	e.item("A", 10, 1)
	e.drain()
	stopCause := errors.New("received terminated")
	ctx, stop := context.WithCancelCause(e.ctx)
	opt := reconcile.Options{LockTTL: time.Hour} // a lock left behind would outlive the test
	reconcile.SetAfterStart(&opt, func(context.Context) { stop(stopCause) })
	rep, err := e.reconciler(opt).Batch(ctx, reconcile.BatchOptions{})
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped batch: report %+v, err %v; want the cancellation", rep, err)
	}
	var status, errText string
	if qerr := e.db.QueryRow(e.ctx, `SELECT status, coalesce(error, '') FROM reconciliation_runs
		WHERE finished_at IS NOT NULL`).Scan(&status, &errText); qerr != nil {
		t.Fatalf("the stopped run's row: %v", qerr)
	}
	if status != "failed" || !strings.Contains(errText, "stopped before the end of the run") ||
		!strings.Contains(errText, stopCause.Error()) {
		t.Fatalf("stopped run: status %q error %q; want failed, saying it stopped and why", status, errText)
	}
	next, err := e.reconciler(reconcile.Options{}).Batch(e.ctx, reconcile.BatchOptions{})
	if err != nil {
		t.Fatalf("the next batch (the lock must be free): %v", err)
	}
	var running int
	_ = e.db.QueryRow(e.ctx, `SELECT count(*) FROM reconciliation_runs WHERE status IN ('running', 'abandoned')`).Scan(&running)
	if running != 0 || !next.Clean() {
		t.Fatalf("after the next run: %d runs running or abandoned, report clean %v", running, next.Clean())
	}
}
