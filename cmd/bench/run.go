package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/redisconn"
)

const (
	benchItem     = "bench" // the item every purchase row buys (stock never runs out)
	goneItem      = "gone"  // a live item with no stock: the sold-out row
	purchaseLimit = "5/1s:10"
	catalogueSize = 20
)

// bench holds what one run set up.
type bench struct {
	opt    options
	out    io.Writer
	logw   io.Writer
	self   string
	apiBin string
	recBin string
	prefix string
	pgDSN  string
	secret string
	admin  string
	api    *child
	apiAdm string // the api's pprof listener
	kafka  string
	rows   []row
	// The baseline servers stay up for the whole run: rows measure them in turns with the api.
	helloSrv, evalSrv, minSrv *child
	// replays are the same-reply baselines (replay.go), started by the rows that use them.
	replays []*child
	rdb     redis.UniversalClient
	// redisInfo reads the private redis-server's INFO cpu (nil with -shared-redis).
	redisInfo *redis.Client
}

func run(ctx context.Context, opt options, out io.Writer) error {
	if opt.short {
		opt.tiny()
	}
	b := &bench{opt: opt, out: out, logw: io.Discard, secret: randomHex(32), admin: randomHex(16)}
	if opt.verbose {
		b.logw = os.Stderr
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "flashsale-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	progress(out, "building ./cmd/api and ./cmd/reconciler")
	if b.apiBin, err = build(root, tmp, "api"); err != nil {
		return err
	}
	if b.apiBin == "" {
		return fmt.Errorf("bench: ./cmd/api not found under %s", root)
	}
	if b.recBin, err = build(root, tmp, "reconciler"); err != nil {
		return err
	}
	if b.self, err = os.Executable(); err != nil {
		return err
	}

	// Before any server starts (children inherit it): the stream rows hold one connection per
	// shopper in this process and in the api.
	if limit, err := raiseFileLimit(0); err == nil {
		progress(out, "open-file limit %d", limit)
	}
	if !opt.sharedRedis {
		stopRedis, err := b.privateRedis(ctx)
		if err != nil {
			return err
		}
		defer stopRedis()
	}
	rdb, err := redisconn.Open(ctx, []string{redisAddr()}, 0)
	if err != nil {
		return err
	}
	defer rdb.Close()
	b.rdb = rdb
	b.prefix = "bench" + randomHex(4) + ":"
	defer deletePrefix(context.Background(), rdb, b.prefix)
	var drop func()
	if b.pgDSN, drop, err = scratchPostgres(ctx, adminDSN()); err != nil {
		return err
	}
	defer drop()

	fmt.Fprintf(out, "flashsale bench: %d CPUs (%s), %s, %d connections, %s per row after %s warm-up\n\n",
		runtime.NumCPU(), cpuModel(), runtime.Version(), opt.conns, opt.dur, opt.warmup())

	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"hello", b.hello},
		{"evalsha", b.evalsha},
		{"minimal", b.minimal},
		{"api", b.startAPI},
		{"reads", b.readRows},
		{"soldout", b.soldOut},
		{"purchase", b.purchase},
		{"replicas", b.replicas},
		{"queue", b.queueRows},
		{"reconciler", b.reconciler},
		{"latency", b.latency},
		{"retention", b.retention},
		{"scale", b.scale},
		{"streams", b.streams},
	}
	defer func() {
		b.api.stop()
		b.helloSrv.stop()
		b.evalSrv.stop()
		b.minSrv.stop()
		for _, c := range b.replays {
			c.stop()
		}
	}()
	// Rows need the servers they are measured against: -only soldout also starts hello and api.
	needs := map[string][]string{
		"reads": {"hello", "api"}, "soldout": {"hello", "api"}, "purchase": {"hello", "evalsha", "minimal", "api"},
		"latency": {"api"}, "queue": {"hello", "api"}, "scale": {"hello"}, "streams": {"api"},
	}
	only := strings.Split(opt.only, ",")
	for _, name := range only {
		only = append(only, needs[name]...)
	}
	for _, step := range steps {
		if opt.only != "" && !slices.Contains(only, step.name) {
			continue
		}
		if err := step.run(ctx); err != nil {
			return err
		}
	}
	b.print()
	return nil
}

func progress(w io.Writer, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func adminDSN() string {
	if d := os.Getenv("FLASHSALE_TEST_POSTGRES"); d != "" {
		return d
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func (b *bench) load(addr string, reqs [][]byte) load {
	l := load{addr: addr, reqs: reqs, conns: b.opt.conns, warmup: b.opt.warmup(), dur: b.opt.dur}
	if b.redisInfo != nil {
		l.redis = b.sampleRedis
	}
	for _, c := range append([]*child{b.api, b.helloSrv, b.evalSrv, b.minSrv}, b.replays...) {
		if c != nil && c.addr == addr && c.cmd.Process != nil {
			l.pid = c.cmd.Process.Pid
		}
	}
	return l
}

// startBaseline re-executes this binary as one baseline server.
func (b *bench) startBaseline(ctx context.Context, mode, prefix string) (*child, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	return start(ctx, mode, b.self, nil, []string{serveEnv + "=" + mode, addrEnv + "=" + addr, prefixEnv + "=" + prefix},
		addr, "", b.logw)
}

// hello starts the bare Gin hello server the reads and sold-out rows compare with.
func (b *bench) hello(ctx context.Context) error {
	progress(b.out, "starting the bare Gin hello server")
	var err error
	b.helloSrv, err = b.startBaseline(ctx, "hello", "")
	return err
}

// evalsha starts the bare Gin + one-EVALSHA-per-purchase server the purchase row compares with.
func (b *bench) evalsha(ctx context.Context) error {
	progress(b.out, "starting the bare Gin + one EVALSHA per purchase server")
	prefix := b.prefix + "e:"
	rdb, err := redisconn.Open(ctx, []string{redisAddr()}, 0)
	if err != nil {
		return err
	}
	defer rdb.Close()
	d := config.Defaults()
	store := inventory.NewStore(rdb, keyspace.Space{Prefix: prefix}, inventory.Options{
		ReservationTTL: d.ReservationTTL, IdempotencyTTL: d.IdempotencyTTL, SnapshotInterval: d.SnapshotInterval,
		PurchaseBatch: d.PurchaseBatch, PurchaseInFlight: d.PurchaseInFlight, PurchaseLinger: d.PurchaseLinger,
	})
	stock := int64(1e12)
	if _, _, err := store.Upsert(ctx, inventory.Input{ID: benchItem, Name: "Bench", PriceCents: 100, Stock: &stock, PerUserLimit: 1e9}); err != nil {
		return err
	}
	b.evalSrv, err = b.startBaseline(ctx, "evalsha", prefix)
	return err
}

// helloLoad is the hello baseline's GET, or nothing when the hello server is not up (-only).
func (b *bench) helloLoads(extra ...[][]byte) []load {
	if b.helloSrv == nil {
		return nil
	}
	ls := []load{b.load(b.helloSrv.addr, [][]byte{request("GET", b.helloSrv.addr, "/hello", nil, "")})}
	for _, reqs := range extra {
		ls = append(ls, b.load(b.helloSrv.addr, reqs))
	}
	return ls
}

// baseAt returns the i-th baseline result, nil when it was not measured.
func baseAt(bases []result, i int) *result {
	if i < len(bases) {
		return &bases[i]
	}
	return nil
}

func (b *bench) startAPI(ctx context.Context) error {
	progress(b.out, "starting the api (embedded Kafka broker, outbox relay)")
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	if b.kafka, err = freeAddr(); err != nil {
		return err
	}
	if b.apiAdm, err = freeAddr(); err != nil {
		return err
	}
	env := []string{
		"FLASHSALE_HTTP_ADDR=" + addr, "FLASHSALE_PAYMENT_SIM_ADDR=127.0.0.1:0",
		"FLASHSALE_ADMIN_ADDR=" + b.apiAdm,
		"FLASHSALE_REDIS_PREFIX=" + b.prefix + "a:",
		"FLASHSALE_EMBEDDED_KAFKA_ADDR=" + b.kafka,
		"FLASHSALE_JWT_SECRET=" + b.secret,
		"FLASHSALE_ADMIN_TOKEN=" + b.admin,
		"FLASHSALE_POSTGRES_DSN=" + b.pgDSN,
		"FLASHSALE_LIMIT_PURCHASE=" + purchaseLimit,
		"FLASHSALE_LIMIT_LOGIN_IP=off",
		// The stream rows are 10,000 shoppers from this one address: the per-client cap (32)
		// is for the internet, not for a load generator.
		"FLASHSALE_STREAM_PER_CLIENT=1000000",
	}
	if b.api, err = start(ctx, "api", b.apiBin, nil, env, addr, "/readyz", b.logw); err != nil {
		return err
	}
	// The catalogue: the item every purchase buys, a sold-out item, and ordinary items.
	items := map[string]map[string]any{
		benchItem: {"name": "Bench", "category": "bench", "price_cents": 100, "stock": int64(1e12), "per_user_limit": int64(1e9)},
		goneItem:  {"name": "Gone", "category": "bench", "price_cents": 100, "stock": 0, "per_user_limit": 1},
	}
	for i := 0; i < catalogueSize-2; i++ {
		items[fmt.Sprintf("item-%02d", i)] = map[string]any{
			"name": fmt.Sprintf("Item %d", i), "category": []string{"phones", "laptops", "audio"}[i%3],
			"price_cents": 1000 + i, "stock": 100, "per_user_limit": 2,
			"ends_at": time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339),
		}
	}
	for id, body := range items {
		if err := b.admin2xx(ctx, "PUT", "/api/admin/items/"+id, body); err != nil {
			return err
		}
	}
	return nil
}

// admin2xx sends one admin request to the api and wants a 2xx.
func (b *bench) admin2xx(ctx context.Context, method, path string, body any) error {
	j, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, method, "http://"+b.api.addr+path, bytes.NewReader(j))
	req.Header.Set("Authorization", "Bearer "+b.admin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("bench: %s %s: %d %s", method, path, resp.StatusCode, msg)
	}
	return nil
}

func (b *bench) readRows(ctx context.Context) error {
	for _, r := range []struct{ name, prof, path string }{
		{"GET /api/items reads/s", "items", "/api/items"},
		{"GET /api/items/{id} reads/s", "item", "/api/items/item-01"},
		{"GET /api/leaderboards/best-sellers reads/s", "board", "/api/leaderboards/best-sellers?limit=10"},
	} {
		progress(b.out, "%s", r.path)
		req := request("GET", b.api.addr, r.path, nil, "")
		bases := b.helloLoads()
		// The catalogue row also goes beside a bare Gin handler writing the api's
		// very reply, recorded once (replay.go): net/http writes a reply past its 4 KB
		// connection buffer in two syscalls, and the same bytes pay the same there.
		var replay *child
		if r.path == "/api/items" && bases != nil {
			var err error
			if replay, err = b.startReplay(ctx, "replay-items", []replayRequest{{req, "GET", r.path}}); err != nil {
				return err
			}
			bases = append(bases, b.load(replay.addr, [][]byte{request("GET", replay.addr, r.path, nil, "")}))
		}
		size, err := b.bodySize(ctx, r.path)
		if err != nil {
			return err
		}
		res, got, turns, err := b.measureTurns(ctx, r.prof, b.load(b.api.addr, [][]byte{req}), bases...)
		if err != nil {
			return err
		}
		b.rows = append(b.rows, row{name: r.name, res: &res, base: baseAt(got, 0), baseName: "bare Gin hello", target: 0.8, want: 200,
			note: fmt.Sprintf("the reply's body is %s bytes (the hello's: 17)", thousands(float64(size)))})
		if replay != nil {
			same := row{name: itemsSameRowName, res: &res, base: baseAt(got, 1), target: 0.9, want: 200,
				baseName: fmt.Sprintf("bare Gin writing the api's reply (%s-byte body, same headers)", thousands(float64(size)))}
			same.ratioText, _ = turnCells(turns[0], turns[2])
			b.rows = append(b.rows, same)
		}
	}
	return nil
}

// bodySize is the length of the api's plain answer to GET path.
func (b *bench) bodySize(ctx context.Context, path string) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+b.api.addr+path, nil)
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		return 0, fmt.Errorf("bench: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		return 0, fmt.Errorf("bench: GET %s: %d %v", path, resp.StatusCode, err)
	}
	return len(body), nil
}

// purchaseReqs builds n purchase requests of item by distinct shoppers, addressed to addr.
func (b *bench) purchaseReqs(addr, item, userPrefix string, n int) [][]byte {
	reqs := make([][]byte, n)
	for i := range reqs {
		reqs[i] = request("POST", addr, "/api/items/"+item+"/purchase",
			map[string]string{"Authorization": "Bearer " + token(b.secret, userPrefix+itoa(i))}, `{"quantity":1}`)
	}
	return reqs
}

// The same-reply rows' names (rowNames).
const (
	itemsSameRowName   = "GET /api/items reads/s (same reply from a bare Gin)"
	soldOutSameRowName = "sold-out answers/s (same 409 reply from a bare Gin, same request bytes)"
)

func (b *bench) soldOut(ctx context.Context) error {
	progress(b.out, "sold-out purchases")
	bases := b.helloLoads()
	if bases != nil {
		// The target's baseline: a bare Gin handler answering the api's very 409 (status,
		// headers, body, recorded once) to the sold-out row's very requests (same tokens,
		// headers and body; only the Host header's port differs).
		replay, err := b.startReplay(ctx, "replay-soldout",
			[]replayRequest{{b.purchaseReqs(b.api.addr, goneItem, "u", 1)[0], "POST", "/api/items/:id/purchase"}})
		if err != nil {
			return err
		}
		bases = append(bases, b.load(replay.addr, b.purchaseReqs(replay.addr, goneItem, "u", b.opt.users)))
	}
	res, got, turns, err := b.measureTurns(ctx, "soldout", b.load(b.api.addr, b.purchaseReqs(b.api.addr, goneItem, "u", b.opt.users)), bases...)
	if err != nil {
		return err
	}
	// Beside the GET hello: the next row is the goal; this one is kept for comparison with
	// earlier runs in docs/performance.md.
	b.rows = append(b.rows, row{name: "sold-out answers/s", res: &res, base: baseAt(got, 0), baseName: "bare Gin hello", want: 409})
	if len(got) > 1 {
		same := row{name: soldOutSameRowName, res: &res, base: baseAt(got, 1), target: 0.9, want: 409,
			baseName: "bare Gin writing the api's 409"}
		same.ratioText, _ = turnCells(turns[0], turns[2])
		b.rows = append(b.rows, same)
	}
	return nil
}
