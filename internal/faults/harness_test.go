//go:build faults

// Package faults is the fault matrix (issue 13): whole apps as real processes (the api and
// reconciler binaries, built with -race), a private redis-server with AOF, the shared
// PostgreSQL (a throw-away database), a Kafka-protocol broker held by the test, and Shopify's
// toxiproxy (in-process) between the processes and Redis and Postgres. Each scenario injects
// its fault for real (DEBUG SLEEP, connection resets, latency, kill -9, server restarts),
// records every client call, and checks the sale's invariants at the end.
package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flashsale/flashsale/internal/kafkabroker"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/testenv"
)

const (
	topic      = "flashsale.orders"
	adminToken = "faults-admin-token-0123456789abcdef"
	jwtSecret  = "faults-jwt-secret-0123456789abcdef0123"
)

// bins are the api and reconciler binaries, built once with -race by TestMain.
var bins struct{ api, reconciler string }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "flashsale-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.api, bins.reconciler = filepath.Join(dir, "api"), filepath.Join(dir, "reconciler")
	for _, b := range []struct{ out, pkg string }{{bins.api, "./cmd/api"}, {bins.reconciler, "./cmd/reconciler"}} {
		cmd := exec.Command("go", "build", "-race", "-o", b.out, b.pkg)
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "faults: go build %s: %v\n%s", b.pkg, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// sale is one scenario's world.
type sale struct {
	t      *testing.T
	dir    string
	prefix string

	redisPort int
	redisSrv  *exec.Cmd
	rdb       *redis.Client // direct to the server: the checks, DEBUG SLEEP, FLUSHDB
	toxics    *toxiproxy.ApiServer
	redisPx   *toxiproxy.Proxy // every process reaches Redis through it
	pgPx      *toxiproxy.Proxy // the reconciler reaches Postgres through it
	dsn       string           // direct
	db        *pgxpool.Pool
	broker    *kafkabroker.Broker

	env        []string
	apis       []*proc
	reconciler *proc
	shop       *shop
}

type saleOptions struct {
	reservationTTL time.Duration // default 10m
	extraEnv       []string
}

func newSale(t *testing.T, opt saleOptions) *sale {
	t.Helper()
	s := &sale{t: t, dir: t.TempDir(), prefix: "f" + testenv.Token(4) + ":"}
	s.redisPort = freePort(t)
	s.startRedis()
	t.Cleanup(s.stopRedis)
	s.rdb = redis.NewClient(&redis.Options{Addr: s.redisAddr(), MaxRetries: -1})
	t.Cleanup(func() { s.rdb.Close() })

	s.toxics = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	s.redisPx = s.proxy("redis", s.redisAddr())
	s.dsn = testenv.Postgres(t)
	u, _ := url.Parse(s.dsn)
	s.pgPx = s.proxy("postgres", u.Host)
	u.Host = s.pgPx.Listen
	proxiedDSN := u.String()
	db, err := pgxpool.New(context.Background(), s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	s.db = db
	s.broker = testenv.Kafka(t, topic, 3)

	ttl := opt.reservationTTL
	if ttl == 0 {
		ttl = 10 * time.Minute
	}
	s.env = append([]string{
		"FLASHSALE_REDIS_ADDRS=" + s.redisPx.Listen,
		"FLASHSALE_REDIS_PREFIX=" + s.prefix,
		"FLASHSALE_POSTGRES_DSN=" + proxiedDSN,
		"KAFKA_BROKERS=" + s.broker.Addr(),
		"FLASHSALE_KAFKA_TOPIC=" + topic,
		"FLASHSALE_JWT_SECRET=" + jwtSecret,
		"FLASHSALE_ADMIN_TOKEN=" + adminToken,
		"FLASHSALE_DEV_LOGIN=true",
		"FLASHSALE_RESERVATION_TTL=" + ttl.String(),
		"FLASHSALE_SHUTDOWN_TIMEOUT=5s",
		// The matrix tests faults, not rate limits: 2,000 shoppers log in from one address.
		"FLASHSALE_LIMIT_PURCHASE=off", "FLASHSALE_LIMIT_PAY=off", "FLASHSALE_LIMIT_CANCEL=off",
		"FLASHSALE_LIMIT_LOGIN_USER=off", "FLASHSALE_LIMIT_LOGIN_IP=off",
		"PATH=" + os.Getenv("PATH"),
	}, opt.extraEnv...)
	s.shop = &shop{s: s, hc: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 256}}, tokens: map[string]string{}}
	return s
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// keys is the processes' key space (FLASHSALE_REDIS_PREFIX), for the checks.
func (s *sale) keys() keyspace.Space { return keyspace.Space{Prefix: s.prefix} }

// waitNoReservations waits until every reservation of the items was paid, cancelled or expired,
// so Redis stops changing before it is compared with Postgres.
func (s *sale) waitNoReservations(items map[string]int, within time.Duration) {
	s.t.Helper()
	s.waitFor("every reservation to expire", within, func() bool {
		for id := range items {
			if n, _ := s.rdb.HGet(context.Background(), s.keys().Item(id).Hash(), "reserved").Int(); n != 0 {
				return false
			}
		}
		return true
	})
}

func (s *sale) redisAddr() string { return "127.0.0.1:" + strconv.Itoa(s.redisPort) }

// startRedis runs the private server with an AOF fsynced on every write, so a kill -9 loses
// nothing it acknowledged, and DEBUG enabled for the stall.
func (s *sale) startRedis() {
	s.t.Helper()
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(s.redisPort),
		"--dir", s.dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always",
		"--enable-debug-command", "yes", "--logfile", filepath.Join(s.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redis-server: %v (install it: apt-get install redis-server)", err)
	}
	s.redisSrv = cmd
	s.waitFor("redis-server to answer", 20*time.Second, func() bool {
		c := redis.NewClient(&redis.Options{Addr: s.redisAddr(), MaxRetries: -1})
		defer c.Close()
		return c.Ping(context.Background()).Err() == nil
	})
}

func (s *sale) stopRedis() {
	if s.redisSrv != nil && s.redisSrv.Process != nil {
		_ = s.redisSrv.Process.Kill()
		_ = s.redisSrv.Wait()
	}
}

// killRedis is kill -9 of the server; restartRedis starts it again from its AOF.
func (s *sale) killRedis()    { s.stopRedis() }
func (s *sale) restartRedis() { s.startRedis() }

func (s *sale) proxy(name, upstream string) *toxiproxy.Proxy {
	s.t.Helper()
	p := toxiproxy.NewProxy(s.toxics, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(p.Stop)
	return p
}

func (s *sale) addToxic(p *toxiproxy.Proxy, spec string) {
	s.t.Helper()
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		s.t.Fatalf("toxic %s: %v", spec, err)
	}
}

func (s *sale) removeToxic(p *toxiproxy.Proxy, name string) {
	s.t.Helper()
	if err := p.Toxics.RemoveToxic(context.Background(), name); err != nil {
		s.t.Fatalf("remove toxic %s: %v", name, err)
	}
}

// proc is one real process of ours.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	url  string // the api's base URL
	done chan struct{}
	err  error
}

// startAPI starts an api process and waits until /readyz answers 200.
func (s *sale) startAPI(extraEnv ...string) *proc {
	s.t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(s.t))
	p := s.start(fmt.Sprintf("api%d", len(s.apis)), bins.api, nil,
		append([]string{"FLASHSALE_HTTP_ADDR=" + addr}, extraEnv...))
	p.url = "http://" + addr
	s.waitFor(p.name+" ready", 60*time.Second, func() bool {
		r, err := http.Get(p.url + "/readyz")
		if err == nil {
			r.Body.Close()
		}
		return err == nil && r.StatusCode == 200
	})
	s.apis = append(s.apis, p)
	return p
}

// startReconciler starts the consumer and waits until it consumes.
func (s *sale) startReconciler(extraEnv ...string) *proc {
	s.t.Helper()
	p := s.start("reconciler", bins.reconciler, nil, extraEnv)
	s.waitFor("reconciler consuming", 60*time.Second, func() bool { return p.logged("reconciler consuming") })
	s.reconciler = p
	return p
}

func (s *sale) start(name, bin string, args, extraEnv []string) *proc {
	s.t.Helper()
	logPath := filepath.Join(s.dir, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append([]string{}, s.env...), extraEnv...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); f.Close(); close(p.done) }()
	s.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if s.t.Failed() {
			b, _ := os.ReadFile(logPath)
			s.t.Logf("--- %s log (last 3000 bytes):\n%s", name, tail(b, 3000))
		}
	})
	return p
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func (p *proc) logged(s string) bool {
	b, _ := os.ReadFile(p.log)
	return bytes.Contains(b, []byte(s))
}

// kill9 is kill -9: no shutdown hook runs.
func (p *proc) kill9() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitFor polls cond until it holds or the deadline passes (a condition, never a fixed time).
func (s *sale) waitFor(what string, within time.Duration, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runReconciler runs a one-shot reconciler command (batch, restore) to its end.
func (s *sale) runReconciler(args ...string) (string, error) {
	cmd := exec.Command(bins.reconciler, args...)
	cmd.Env = s.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// shop drives the api over HTTP as shoppers and an admin would, recording every call.
type shop struct {
	s  *sale
	hc *http.Client

	mu     sync.Mutex
	tokens map[string]string
	calls  []*call
	next   int // round-robin over the apis
}

// call is one client call and what it learnt.
type call struct {
	kind, user, item, key string
	status                int // 0: a transport error (no answer)
	code, message         string
	orderID               string
	started               time.Time
	took                  time.Duration
}

// unknown reports whether the caller cannot know whether the call changed anything.
func (c *call) unknown() bool {
	return c.status == 0 || (c.status == 503 && strings.Contains(c.message, "outcome is unknown")) || c.status == 500
}

func (sh *shop) api() string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	live := []*proc{}
	for _, p := range sh.s.apis {
		if !p.exited() {
			live = append(live, p)
		}
	}
	sh.next++
	return live[sh.next%len(live)].url
}

func (sh *shop) do(method, path, token, key string, body any) (int, map[string]any, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, sh.api()+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := sh.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, nil
}

func (sh *shop) admin(method, path string, body any) map[string]any {
	sh.s.t.Helper()
	status, out, err := sh.do(method, path, adminToken, "", body)
	if err != nil || status >= 300 {
		sh.s.t.Fatalf("admin %s %s: %d %v %v", method, path, status, out, err)
	}
	return out
}

func (sh *shop) item(id string, stock, limit int) {
	sh.admin("PUT", "/api/admin/items/"+id, map[string]any{"name": "Item " + id, "category": "c",
		"price_cents": 999, "stock": stock, "per_user_limit": limit})
}

// login mints tokens for n shoppers named prefix0..prefix(n-1), 32 at a time.
func (sh *shop) login(prefix string, n int) []string {
	sh.s.t.Helper()
	users := make([]string, n)
	for i := range users {
		users[i] = prefix + strconv.Itoa(i)
	}
	parallel(32, users, func(u string) {
		for {
			status, out, err := sh.do("POST", "/api/login", "", "", map[string]string{"user": u})
			if err == nil && status == 200 {
				sh.mu.Lock()
				sh.tokens[u] = out["token"].(string)
				sh.mu.Unlock()
				return
			}
			time.Sleep(50 * time.Millisecond) // a fault may be on: try again
		}
	})
	return users
}

func (sh *shop) record(c *call) {
	sh.mu.Lock()
	sh.calls = append(sh.calls, c)
	sh.mu.Unlock()
}

func (sh *shop) token(u string) string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.tokens[u]
}

// buy is one purchase call (quantity 1), recorded; with a key, a call whose outcome is
// unknown is sent again with the same key, as the shopper page does, up to 5 times.
func (sh *shop) buy(user, item, key string) *call {
	for attempt := 0; ; attempt++ {
		c := &call{kind: "purchase", user: user, item: item, key: key, started: time.Now()}
		start := c.started
		status, out, err := sh.do("POST", "/api/items/"+item+"/purchase", sh.token(user), key, map[string]int{"quantity": 1})
		c.took = time.Since(start)
		sh.fill(c, status, out, err)
		sh.record(c)
		if key == "" || !c.unknown() || attempt == 4 {
			return c
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// order calls pay or cancel on an order, recorded.
func (sh *shop) order(kind, user, id string) *call {
	c := &call{kind: kind, user: user}
	start := time.Now()
	status, out, err := sh.do("POST", "/api/orders/"+id+"/"+kind, sh.token(user), "", nil)
	c.took = time.Since(start)
	sh.fill(c, status, out, err)
	sh.record(c)
	return c
}

func (sh *shop) restock(item string, delta int) *call {
	c := &call{kind: "restock", item: item}
	status, out, err := sh.do("POST", "/api/admin/items/"+item+"/stock", adminToken, "", map[string]int{"delta": delta})
	sh.fill(c, status, out, err)
	sh.record(c)
	return c
}

func (sh *shop) fill(c *call, status int, out map[string]any, err error) {
	c.status = status
	if err != nil {
		c.message = err.Error()
		return
	}
	if e, ok := out["error"].(map[string]any); ok {
		c.code, _ = e["code"].(string)
		c.message, _ = e["message"].(string)
	}
	if o, ok := out["order"].(map[string]any); ok {
		c.orderID, _ = o["id"].(string)
	}
}

// parallel runs f over xs with n goroutines.
func parallel[T any](n int, xs []T, f func(T)) {
	ch := make(chan T)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := range ch {
				f(x)
			}
		}()
	}
	for _, x := range xs {
		ch <- x
	}
	close(ch)
	wg.Wait()
}

// figures are one scenario's row of docs/reliability.md.
type figures struct {
	calls, created, unknown, duplicates, lost, oversold int
	unchanged                                           int // answered 503 "nothing was changed"
	recover                                             time.Duration
	slowest                                             time.Duration // the longest a purchase waited
}

// verify settles the sale and checks every invariant of the matrix; it returns the row.
func (s *sale) verify(items map[string]int) figures {
	s.t.Helper()
	ctx := context.Background()
	sh := s.shop
	var f figures

	// Redis: the live state.
	redisOrders := map[string]order{} // id -> order
	for item, limit := range items {
		k := s.keys().Item(item)
		h := s.rdb.HGetAll(ctx, k.Hash()).Val()
		total, _ := strconv.Atoi(h["stock_total"])
		left, _ := strconv.Atoi(h["stock_left"])
		reserved, _ := strconv.Atoi(h["reserved"])
		paid, _ := strconv.Atoi(h["paid"])
		if left < 0 || left+reserved+paid != total {
			f.oversold++
			s.t.Errorf("%s: stock_left %d + reserved %d + paid %d != stock_total %d", item, left, reserved, paid, total)
		}
		var sumReserved, sumPaid int
		perUser := map[string]int{}
		for id, packed := range s.rdb.HGetAll(ctx, k.Orders()).Val() {
			o := parseOrder(id, item, packed)
			redisOrders[id] = o
			switch o.status {
			case "reserved":
				sumReserved += o.qty
				perUser[o.user] += o.qty
			case "paid":
				sumPaid += o.qty
				perUser[o.user] += o.qty
			}
		}
		if sumReserved != reserved || sumPaid != paid {
			f.oversold++
			s.t.Errorf("%s: orders hold %d reserved and %d paid, the item says %d and %d", item, sumReserved, sumPaid, reserved, paid)
		}
		for u, q := range perUser {
			if q > limit {
				s.t.Errorf("%s: user %s holds %d, over the limit %d", item, u, q, limit)
			}
		}
	}

	// The calls: every answered order exists; every order was answered or has an unknown call.
	answered := map[string]bool{}
	unknown := map[[2]string]int{}
	keyOrders := map[string]map[string]bool{}
	for _, c := range sh.calls {
		f.calls++
		if c.status == 503 && !c.unknown() {
			f.unchanged++
		}
		if c.unknown() {
			f.unknown++
			if c.kind == "purchase" {
				unknown[[2]string{c.user, c.item}]++
			}
		}
		if c.kind == "purchase" && c.took > f.slowest {
			f.slowest = c.took
		}
		if c.kind != "purchase" || c.orderID == "" {
			continue
		}
		if c.status == 201 {
			f.created++
		}
		answered[c.orderID] = true
		if _, ok := redisOrders[c.orderID]; !ok {
			f.lost++
			s.t.Errorf("order %s answered %d to %s is not in Redis", c.orderID, c.status, c.user)
		}
		if c.key != "" {
			kk := c.user + "/" + c.key
			if keyOrders[kk] == nil {
				keyOrders[kk] = map[string]bool{}
			}
			keyOrders[kk][c.orderID] = true
		}
	}
	for kk, ids := range keyOrders {
		if len(ids) > 1 {
			f.duplicates += len(ids) - 1
			s.t.Errorf("one Idempotency-Key (%s) answered %d different orders", kk, len(ids))
		}
	}
	unanswered := map[[2]string]int{}
	for id, o := range redisOrders {
		if !answered[id] {
			unanswered[[2]string{o.user, o.item}]++
		}
	}
	for ui, n := range unanswered {
		if n > unknown[ui] {
			f.duplicates += n - unknown[ui]
			s.t.Errorf("%s holds %d orders of %s nobody was answered, with only %d calls of unknown outcome", ui[0], n, ui[1], unknown[ui])
		}
	}

	// Postgres: settles to exactly Redis's orders.
	settleStart := time.Now()
	defer func() { s.t.Logf("Postgres settled %.1f s after the checks began", time.Since(settleStart).Seconds()) }()
	s.waitFor("Postgres to hold exactly Redis's orders", 120*time.Second, func() bool {
		rows, err := s.db.Query(ctx, `SELECT id, status FROM orders`)
		if err != nil {
			return false
		}
		defer rows.Close()
		seen := 0
		for rows.Next() {
			var id, status string
			if rows.Scan(&id, &status) != nil {
				return false
			}
			if o, ok := redisOrders[id]; !ok || o.status != status {
				return false
			}
			seen++
		}
		return seen == len(redisOrders)
	})
	// Batch reconciliation agrees.
	if out, err := s.runReconciler("batch", "--json"); err != nil {
		s.t.Errorf("reconciler batch: %v\n%s", err, tail([]byte(out), 3000))
	}
	return f
}

type order struct {
	id, item, user, status string
	qty                    int
}

func parseOrder(id, item, packed string) order {
	p := strings.Split(packed, "|")
	qty, _ := strconv.Atoi(p[1])
	return order{id: id, item: item, user: p[0], status: p[3], qty: qty}
}

// report prints the scenario's row for docs/reliability.md.
func report(t *testing.T, name string, f figures) {
	t.Logf("| %s | %d | %d | %d | %d | %d | %d | %d | %.1f | %.1f |", name, f.calls, f.created, f.unchanged, f.unknown,
		f.duplicates, f.lost, f.oversold, f.recover.Seconds(), f.slowest.Seconds())
	if path := os.Getenv("FAULTS_REPORT"); path != "" {
		fh, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			w := bufio.NewWriter(fh)
			fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %d | %d | %.1f | %.1f |\n", name, f.calls, f.created, f.unchanged, f.unknown,
				f.duplicates, f.lost, f.oversold, f.recover.Seconds(), f.slowest.Seconds())
			w.Flush()
			fh.Close()
		}
	}
}

// metric reads one counter or gauge (no labels) from an api's /metrics.
func metric(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
