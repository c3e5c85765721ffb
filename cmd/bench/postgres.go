package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/events"
	"github.com/flashsale/flashsale/internal/record"
)

// recordBatch is how many events the reconciler row hands the writer per transaction.
const recordBatch = 1000

// reconciler measures the reconciler's write path (record.Writer on its own pool, one
// transaction per batch) against pgx CopyFrom of the same rows, the two taking turns batch by
// batch. A side's CPU per row is this process's CPU during its turns plus its Postgres backend's.
func (b *bench) reconciler(ctx context.Context) error {
	progress(b.out, "reconciler write path vs CopyFrom (%d rows)", b.opt.rows)
	db, err := record.Open(b.pgDSN)
	if err != nil {
		return err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	// One connection, so its backend's CPU is the writer's.
	sqlDB.SetMaxOpenConns(1)
	var recPid int
	if err := db.Raw("SELECT pg_backend_pid()").Scan(&recPid).Error; err != nil {
		return err
	}
	n := b.opt.rows
	at := time.Now().UTC().Truncate(time.Millisecond)
	msgs := make([]kafka.Message, n)
	rows := make([][]any, n)
	evRows := make([][]any, n)
	mvRows := make([][]any, n)
	one, price := int64(1), int64(100)
	for i := range msgs {
		ev := events.Event{
			EventID: fmt.Sprintf("rec/%d-%d", at.UnixMilli(), i), Type: events.OrderReserved, At: at,
			ItemID: "rec", OrderID: fmt.Sprintf("rec.%d", i+1), UserID: "u" + itoa(i%b.opt.users),
			Quantity: &one, PriceCents: &price,
		}
		v, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		msgs[i] = kafka.Message{Topic: "flashsale.orders", Partition: 0, Offset: int64(i), Key: []byte("rec"), Value: v}
		rows[i] = []any{ev.OrderID, ev.ItemID, ev.UserID, one, price, "reserved", at, at}
		evRows[i] = []any{ev.EventID, string(ev.Type), int32(0), int64(i), at}
		mvRows[i] = []any{ev.EventID, ev.ItemID, "reserved", int64(-1), ev.OrderID, at}
	}

	conn, err := pgx.Connect(ctx, b.pgDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var copyPid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&copyPid); err != nil {
		return err
	}
	// The baseline copies the same rows the writer stores for these events: the event ids, the
	// orders and the stock movements, each batch in one transaction, into copies of the tables
	// with the same indexes.
	for _, t := range []string{"processed_events", "orders", "stock_movements"} {
		if _, err := conn.Exec(ctx, "CREATE TABLE bench_copy_"+t+" (LIKE "+t+" INCLUDING ALL)"); err != nil {
			return err
		}
	}
	w := record.NewWriter(db)
	writeBatch := func(i, j int) error {
		res, err := w.Apply(ctx, msgs[i:j])
		if err == nil && res.Applied != j-i {
			err = fmt.Errorf("bench: record.Writer applied %d of %d", res.Applied, j-i)
		}
		return err
	}
	copyBatch := func(i, j int) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"bench_copy_processed_events"},
				[]string{"event_id", "type", "kafka_partition", "kafka_offset", "processed_at"}, pgx.CopyFromRows(evRows[i:j])); err != nil {
				return err
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"bench_copy_orders"},
				[]string{"id", "item_id", "user_id", "quantity", "price_cents", "status", "created_at", "updated_at"}, pgx.CopyFromRows(rows[i:j])); err != nil {
				return err
			}
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"bench_copy_stock_movements"},
				[]string{"event_id", "item_id", "kind", "delta", "order_id", "at"}, pgx.CopyFromRows(mvRows[i:j]))
			return err
		})
	}
	rec := &result{n: int64(n)}
	cp := &result{n: int64(n)}
	pgCPU := map[*result]time.Duration{} // each side's Postgres backend share of its cpu
	self := os.Getpid()
	turn := func(r *result, pid int, f func(i, j int) error, i, j int) error {
		c0, p0, t0 := procCPU(self), procCPU(pid), time.Now()
		err := f(i, j)
		r.elapsed += time.Since(t0)
		pg := procCPU(pid) - p0
		r.cpu += procCPU(self) - c0 + pg
		pgCPU[r] += pg
		return err
	}
	for k, i := 0, 0; i < n; k, i = k+1, i+recordBatch {
		j := min(n, i+recordBatch)
		first, second := func() error { return turn(rec, recPid, writeBatch, i, j) }, func() error { return turn(cp, copyPid, copyBatch, i, j) }
		if k%2 == 1 {
			first, second = second, first
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
	}
	b.rows = append(b.rows, row{
		name:     fmt.Sprintf("reconciler rows/s (record.Writer, batches of %d)", recordBatch),
		res:      rec,
		base:     cp,
		baseName: "pgx CopyFrom (same 3 tables)", target: 0.8, noLatency: true,
		note: fmt.Sprintf("CPU per row is the process's during its turns plus its Postgres backend's, the two taking turns batch by batch: "+
			"record.Writer %s + Postgres %s, CopyFrom %s + Postgres %s",
			perRow(rec.cpu-pgCPU[rec], n), perRow(pgCPU[rec], n), perRow(cp.cpu-pgCPU[cp], n), perRow(pgCPU[cp], n)),
	})
	return nil
}

// perRow is d per row in µs.
func perRow(d time.Duration, n int) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond)/float64(n))
}

// latency runs cmd/reconciler against the api's embedded broker and measures, at 75% of the
// purchase row's rate (the same load, paced), the time from sending a purchase to its order
// row committed in Postgres. A trigger notifies the bench of new rows of
// probe users (every tenth request), so the times are commit times, not polling times.
func (b *bench) latency(ctx context.Context) error {
	name := "purchase → Postgres latency (p50 / p99)"
	if b.recBin == "" {
		b.rows = append(b.rows, row{name: name, note: "n/a: ./cmd/reconciler not built yet"})
		return nil
	}
	progress(b.out, "purchase -> Postgres with cmd/reconciler running")
	conn, err := pgx.Connect(ctx, b.pgDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `
		CREATE FUNCTION bench_notify() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN PERFORM pg_notify('bench_orders', NEW.id); RETURN NULL; END $$;
		CREATE TRIGGER bench_orders_notify AFTER INSERT ON orders FOR EACH ROW
		WHEN (NEW.user_id LIKE 'lat%') EXECUTE FUNCTION bench_notify();
		LISTEN bench_orders`); err != nil {
		return err
	}
	recAdm, err := freeAddr()
	if err != nil {
		return err
	}
	rec, err := start(ctx, "reconciler", b.recBin, nil, []string{
		// The api's embedded broker, with the deployment's login kept beside its log.
		"FLASHSALE_EMBEDDED_KAFKA_ADDR=" + b.kafka,
		"FLASHSALE_POSTGRES_DSN=" + b.pgDSN, "FLASHSALE_ADMIN_ADDR=" + recAdm,
	}, recAdm, "/metrics", b.logw)
	if err != nil {
		return err
	}
	defer rec.stop()
	// Let it drain the backlog the purchase row left, so this row measures the steady path.
	if err := b.waitDrained(ctx, conn); err != nil {
		return err
	}

	c := &commits{sent: map[string]time.Time{}, arrived: map[string]time.Time{}}
	lctx, stopListen := context.WithCancel(ctx)
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		c.listen(lctx, conn)
	}()
	reqs, isProbe := withProbes(b.purchaseReqs(b.api.addr, benchItem, "v", b.opt.users),
		b.purchaseReqs(b.api.addr, benchItem, "lat", max(1, b.opt.users/10)))
	l := b.load(b.api.addr, reqs)
	// At 75% of the purchase row's peak (when it ran): the goal is the latency of a busy sale,
	// not of a saturated api.
	peak := b.peakPurchaseRate()
	l.pace = 0.75 * peak
	l.onReply = func(i, status int, body []byte, at time.Time) {
		if status != 201 || !isProbe[i] {
			return
		}
		if id := orderID(body); id != "" {
			c.send(id, at)
		}
	}
	res, err := l.run(ctx)
	if err != nil {
		stopListen()
		return err
	}
	c.await(60 * time.Second)
	stopListen()
	<-listened
	b.rows = append(b.rows, latencyRow(ctx, conn, name, res, peak, c))
	return nil
}

// withProbes puts a probe request after every ninth shopper's, while probes last; isProbe
// says which of the result are probes.
func withProbes(shoppers, probes [][]byte) (reqs [][]byte, isProbe map[int]bool) {
	reqs = make([][]byte, 0, len(shoppers)+len(probes))
	isProbe = map[int]bool{}
	for i := range shoppers {
		if i%10 == 9 && len(probes) > 0 {
			isProbe[len(reqs)] = true
			reqs = append(reqs, probes[0])
			probes = probes[1:]
		}
		reqs = append(reqs, shoppers[i])
	}
	return reqs, isProbe
}

// commits pairs the probe orders' send times with the times Postgres notified their rows.
type commits struct {
	mu      sync.Mutex
	sent    map[string]time.Time
	arrived map[string]time.Time
}

func (c *commits) send(id string, at time.Time) {
	c.mu.Lock()
	c.sent[id] = at
	c.mu.Unlock()
}

// listen records each notification's arrival until ctx ends.
func (c *commits) listen(ctx context.Context, conn *pgx.Conn) {
	for {
		nf, err := conn.WaitForNotification(ctx)
		if err != nil {
			return
		}
		now := time.Now()
		c.mu.Lock()
		c.arrived[nf.Payload] = now
		c.mu.Unlock()
	}
}

// await waits up to d for every sent probe's row.
func (c *commits) await(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		missing := 0
		for id := range c.sent {
			if _, ok := c.arrived[id]; !ok {
				missing++
			}
		}
		c.mu.Unlock()
		if missing == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// latencyRow is the latency row from the probes' commits, res being the paced load's result.
func latencyRow(ctx context.Context, conn *pgx.Conn, name string, res result, peak float64, c *commits) row {
	var lat []time.Duration
	missing := 0
	for id, t := range c.sent {
		if a, ok := c.arrived[id]; ok {
			lat = append(lat, a.Sub(t))
		} else {
			missing++
		}
	}
	r := row{name: name, noRate: true, wantP99: 250 * time.Millisecond}
	if len(lat) == 0 {
		r.note = "no probe order reached Postgres within 60 s"
		return r
	}
	slices.Sort(lat)
	r.res = &result{n: int64(len(lat)), p50: lat[len(lat)/2], p99: lat[min(len(lat)-1, len(lat)*99/100)]}
	r.note = fmt.Sprintf("%d probe orders at %s purchases/s with the reconciler running", len(lat), thousands(res.rate()))
	if peak > 0 {
		// Paced at 75% of the purchase row's rate; the reconciler and Postgres share the
		// machine meanwhile, so on a busy one the api may not reach it.
		r.note += fmt.Sprintf(" (paced at 75%%, reached %.0f%% of the purchase row's %s/s)", 100*res.rate()/peak, thousands(peak))
	} else {
		r.note += " (closed loop: the purchase row did not run)"
	}
	if missing > 0 {
		r.note += fmt.Sprintf("; %d did not arrive within 60 s", missing)
	}
	if legs, err := latencyLegs(ctx, conn, c.sent, c.arrived); err == nil {
		r.note += "; " + legs
	} else {
		r.note += fmt.Sprintf("; legs not measured: %v", err)
	}
	return r
}

// latencyLegs splits the probes' latency at the times Postgres keeps: the order's created_at
// (the purchase script's clock, ms) and its event's processed_at (when the reconciler began
// writing its batch). So: request to script, script to the reconciler's write (outbox, relay,
// Kafka, the consumer's batch), and that write to its commit.
func latencyLegs(ctx context.Context, conn *pgx.Conn, sent, arrived map[string]time.Time) (string, error) {
	if _, err := conn.Exec(ctx, "ANALYZE orders, stock_movements, processed_events"); err != nil {
		return "", err
	}
	qctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	rows, err := conn.Query(qctx, `SELECT o.id, o.created_at, pe.processed_at FROM orders o
		JOIN stock_movements m ON m.order_id = o.id AND m.kind = 'reserved'
		JOIN processed_events pe ON pe.event_id = m.event_id
		WHERE o.user_id LIKE 'lat%'`)
	if err != nil {
		return "", err
	}
	var api, pipe, write []time.Duration
	var id string
	var created, processed time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &created, &processed}, func() error {
		s, ok1 := sent[id]
		a, ok2 := arrived[id]
		if ok1 && ok2 {
			api, pipe, write = append(api, created.Sub(s)), append(pipe, processed.Sub(created)), append(write, a.Sub(processed))
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if len(api) == 0 {
		return "", fmt.Errorf("no probe found")
	}
	leg := func(d []time.Duration) string {
		slices.Sort(d)
		return fmt.Sprintf("%s / %s", ms(d[len(d)/2]), ms(d[min(len(d)-1, len(d)*99/100)]))
	}
	return fmt.Sprintf("p50 / p99 of its legs: request to purchase script %s (the script's clock is in ms), script to the reconciler's write %s, "+
		"that write to its commit %s", leg(api), leg(pipe), leg(write)), nil
}

// peakPurchaseRate is the purchase row's rate, when it ran.
func (b *bench) peakPurchaseRate() float64 {
	for _, r := range b.rows {
		if r.name == "purchase attempts/s" && r.res != nil {
			return r.res.rate()
		}
	}
	return 0
}

// waitDrained waits until Postgres holds every order the api made so far (progress-checked).
func (b *bench) waitDrained(ctx context.Context, conn *pgx.Conn) error {
	var last int64 = -1
	lastMove := time.Now()
	for {
		var want, got int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM orders WHERE item_id = $1", benchItem).Scan(&got); err != nil {
			return err
		}
		want = b.ordersMade()
		if got >= want {
			return nil
		}
		if got != last {
			last, lastMove = got, time.Now()
		}
		if time.Since(lastMove) > 30*time.Second {
			return fmt.Errorf("bench: the reconciler stalled at %d of %d orders", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// orderID pulls the order id out of {"order":{"id":"...",...}}.
func orderID(body []byte) string {
	_, rest, ok := bytes.Cut(body, []byte(`"id":"`))
	if !ok {
		return ""
	}
	id, _, ok := bytes.Cut(rest, []byte(`"`))
	if !ok {
		return ""
	}
	return string(id)
}
