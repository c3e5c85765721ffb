package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/kafkabroker"
	"github.com/flashsale/flashsale/internal/metrics"
)

// The scale rows: what flashsale costs Redis with a large catalogue and several apis (idle
// commands/s, commands per GET /api/orders, large-catalogue reads, purchase → Kafka latency),
// on a private redis-server so nobody else's traffic counts in its INFO stats.
// docs/performance.md, "What each row measures", defines them; `-only scale` runs them alone.

// scaleIdleTarget is the goal: idle commands/s per api instance, whatever the items.
const scaleIdleTarget = 200

// relaySelling is how many items the relay rows sell (all of them when the catalogue is smaller).
const relaySelling = 100

func (o options) scaleSizes() []int {
	if o.short {
		return []int{10, 100}
	}
	return []int{10, 1000, 10000}
}

func (o options) idleWindow() time.Duration {
	if o.short {
		return 500 * time.Millisecond
	}
	return 5 * time.Second
}

// scale measures the scale rows.
func (b *bench) scale(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "flashsale-bench-redis-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	_, port, _ := strings.Cut(addr, ":")
	progress(b.out, "scale: starting a private redis-server on %s", addr)
	srv, err := start(ctx, "redis-server", "redis-server", []string{"--bind", "127.0.0.1", "--port", port,
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", ""}, nil, addr, "", b.logw)
	if err != nil {
		return fmt.Errorf("%w (install it: apt-get install redis-server)", err)
	}
	defer srv.stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	broker, err := kafkabroker.Start(kafkabroker.Options{Addr: "127.0.0.1:0", Topic: "flashsale.orders", Partitions: 3})
	if err != nil {
		return err
	}
	defer broker.Close()

	sizes := b.opt.scaleSizes()
	for i, n := range sizes {
		s := &scaleRun{b: b, rdb: rdb, redisAddr: addr, redisPid: srv.cmd.Process.Pid, kafka: broker.Addr(), items: n,
			prefix: fmt.Sprintf("scale%d:", n)}
		err := s.measure(ctx, i == 0 || i == len(sizes)-1, i == len(sizes)-1)
		s.stop()
		if err != nil {
			return err
		}
	}
	return nil
}

// scaleRun is one catalogue size: its apis and what they share.
type scaleRun struct {
	b         *bench
	rdb       *redis.Client
	redisAddr string
	redisPid  int
	kafka     string
	prefix    string
	ids       string // the items' ids are this and a number ("s" when empty)
	items     int
	apis      []*child
	admins    []string // each api's /metrics listener
}

func (s *scaleRun) stop() {
	for _, a := range s.apis {
		a.stop()
	}
}

func (s *scaleRun) startAPI(ctx context.Context) (*child, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	adm, err := freeAddr()
	if err != nil {
		return nil, err
	}
	env := []string{
		"FLASHSALE_HTTP_ADDR=" + addr,
		"FLASHSALE_ADMIN_ADDR=" + adm,
		"FLASHSALE_REDIS_ADDRS=" + s.redisAddr,
		"FLASHSALE_REDIS_PREFIX=" + s.prefix,
		"KAFKA_BROKERS=" + s.kafka,
		"FLASHSALE_JWT_SECRET=" + s.b.secret,
		"FLASHSALE_ADMIN_TOKEN=" + s.b.admin,
		"FLASHSALE_POSTGRES_DSN=" + s.b.pgDSN,
		"FLASHSALE_HTTP_WRITE_TIMEOUT=5m", // one import call loads the catalogue
		"FLASHSALE_LIMIT_READS=off",       // the orders row reads one shopper's orders over and over
		"FLASHSALE_PAYMENT_PROVIDER=none", // several apis: each would start a simulator on its port
	}
	c, err := start(ctx, fmt.Sprintf("api-%d-%d", s.items, len(s.apis)), s.b.apiBin, nil, env, addr, "/readyz", s.b.logw)
	if err != nil {
		return nil, err
	}
	s.apis = append(s.apis, c)
	s.admins = append(s.admins, adm)
	return c, nil
}

// measure loads the catalogue through the first api, then measures idle with 1 api, the
// orders call (when orders), the large catalogue read (when reads), and idle with 3 apis.
func (s *scaleRun) measure(ctx context.Context, orders, reads bool) error {
	api, err := s.startAPI(ctx)
	if err != nil {
		return err
	}
	progress(s.b.out, "scale: importing %d items", s.items)
	began := time.Now()
	if err := s.importItems(ctx, api.addr); err != nil {
		return err
	}
	loaded := time.Since(began)
	// Every item.upserted event relayed to Kafka: the api is idle from then on.
	if err := s.waitPublished(ctx, int64(s.items)); err != nil {
		return err
	}
	note := fmt.Sprintf("the import of %d items took %.1f s", s.items, loaded.Seconds())
	if err := s.idleRow(ctx, note); err != nil {
		return err
	}
	if orders {
		if err := s.ordersRow(ctx, api.addr); err != nil {
			return err
		}
	}
	if reads { // the largest catalogue
		if err := s.pageRow(ctx, api); err != nil {
			return err
		}
		if err := s.relayRows(ctx, api); err != nil {
			return err
		}
	}
	for len(s.apis) < 3 {
		c, err := s.startAPI(ctx)
		if err != nil {
			return err
		}
		// Its first catalogue read loads the whole snapshot once (one HGETALL per item): done
		// before the window, which measures the steady idle state, not the start.
		resp, err := http.Get("http://" + c.addr + "/api/items?limit=1")
		if err != nil {
			return fmt.Errorf("bench: first catalogue read: %w", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return s.idleRow(ctx, "")
}

// pageRow measures GET /api/items?limit=50 (a page of the catalogue, as a shop's page asks
// it) beside the hello handler: asked plain, and with Accept-Encoding: gzip as every browser
// sends it, in turns with the hello and with a bare Gin answering a body of the page's size.
func (s *scaleRun) pageRow(ctx context.Context, api *child) error {
	const path = "/api/items?limit=50"
	progress(s.b.out, "scale: GET %s with %d items", path, s.items)
	size := func(headers map[string]string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+api.addr+path, nil)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			return 0, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != headers["Accept-Encoding"] {
			return 0, fmt.Errorf("bench: GET %s %v: %d %q %.100s", path, headers, resp.StatusCode, resp.Header.Get("Content-Encoding"), body)
		}
		return len(body), nil
	}
	plain, err := size(nil)
	if err != nil {
		return err
	}
	gz := map[string]string{"Accept-Encoding": "gzip"}
	zipped, err := size(gz)
	if err != nil {
		return err
	}
	apiLoad := func(headers map[string]string) load {
		l := s.b.load(api.addr, [][]byte{request("GET", api.addr, path, headers, "")})
		l.pid = api.cmd.Process.Pid
		l.adm = s.admins[0]
		return l
	}
	bases := []load{apiLoad(gz)}
	if s.b.helloSrv != nil {
		bases = append(bases, s.b.helloLoads([][]byte{request("GET", s.b.helloSrv.addr, "/bytes/"+strconv.Itoa(plain), nil, "")})...)
	}
	res, others, err := s.b.measure(ctx, "items-large", apiLoad(nil), bases...)
	if err != nil {
		return err
	}
	name := func(how string) string {
		return fmt.Sprintf("GET /api/items reads/s, large catalogue (%s items, ?limit=50, %s)", thousands(float64(s.items)), how)
	}
	hello, same := baseAt(others, 1), baseAt(others, 2)
	s.b.rows = append(s.b.rows,
		row{name: name("Accept-Encoding: gzip"), res: &others[0], base: hello, baseName: "bare Gin hello", target: 0.8, want: 200,
			note: fmt.Sprintf("a page is %s bytes gzip-compressed, %s plain (the hello's body: 17)", thousands(float64(zipped)), thousands(float64(plain)))},
		row{name: name("plain"), res: &res, base: hello, baseName: "bare Gin hello", target: 0.8, want: 200},
		// Not a target: the plain reads beside a bare Gin answering a body of the page's
		// size, so the bytes on the wire cost the same on both sides.
		row{name: name("plain; beside as many bytes"), res: &res, base: same,
			baseName: fmt.Sprintf("bare Gin, a %s-byte body", thousands(float64(plain))), want: 200})
	return nil
}

// itemID is the id of the catalogue's i-th item.
func (s *scaleRun) itemID(i int) string {
	p := s.ids
	if p == "" {
		p = "s"
	}
	return fmt.Sprintf("%s%05d", p, i)
}

// importItems loads s.items items (stock 100, limit 2) in one admin import.
func (s *scaleRun) importItems(ctx context.Context, addr string) error {
	var csv bytes.Buffer
	csv.WriteString("id,name,category,price_cents,stock,per_user_limit,starts_at,ends_at\n")
	for i := range s.items {
		fmt.Fprintf(&csv, "%s,Item %d,%s,%d,100,2,,\n", s.itemID(i), i, []string{"phones", "laptops", "audio"}[i%3], 1000+i)
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/api/admin/items/import", &csv)
	req.Header.Set("Authorization", "Bearer "+s.b.admin)
	req.Header.Set("Content-Type", "text/csv")
	resp, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
	if err != nil {
		return fmt.Errorf("bench: import %d items: %w", s.items, err)
	}
	defer resp.Body.Close()
	var out struct{ Created, Failed int }
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &out); err != nil || resp.StatusCode != 200 || out.Created != s.items || out.Failed != 0 {
		return fmt.Errorf("bench: import %d items: %d %s", s.items, resp.StatusCode, body)
	}
	return nil
}

// waitPublished waits until the apis' relays together published at least n events.
func (s *scaleRun) waitPublished(ctx context.Context, n int64) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var sum float64
		for _, adm := range s.admins {
			v, err := metrics.Scrape("http://"+adm, "flashsale_relay_published_events_total")
			if err != nil {
				return err
			}
			sum += v
		}
		if int64(sum) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the relay published %v of %d events in 3 minutes", sum, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// commands is the server's total_commands_processed (the INFO call itself counts one).
func (s *scaleRun) commands(ctx context.Context) (int64, error) {
	info, err := s.rdb.Info(ctx, "stats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("bench: INFO stats has no total_commands_processed")
}

// idleRate is Redis's commands/s over one window with no client traffic, and the share of one
// core redis-server used meanwhile (near 1: saturated, the rate is a floor of the demand).
func (s *scaleRun) idleRate(ctx context.Context) (rate, cpu float64, err error) {
	c0, err := s.commands(ctx)
	if err != nil {
		return 0, 0, err
	}
	cpu0 := procCPU(s.redisPid)
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(s.b.opt.idleWindow()): // the window is the measure, not a wait for an outcome
	}
	c1, err := s.commands(ctx)
	if err != nil {
		return 0, 0, err
	}
	took := time.Since(t0)
	return float64(c1-c0-1) / took.Seconds(), float64(procCPU(s.redisPid)-cpu0) / float64(took), nil
}

// settle waits until Redis's command rate stops falling (two consecutive short windows within
// 15% of each other), at most 20 s: after an import the snapshot loops read the imported items
// back once (one HGETALL each), and the idle row is the steady state after that, not the tail
// of the load.
func (s *scaleRun) settle(ctx context.Context) (bool, error) {
	step, limit := time.Second, 20*time.Second
	if s.b.opt.short {
		step, limit = 200*time.Millisecond, 3*time.Second
	}
	sample := func() (float64, error) {
		c0, err := s.commands(ctx)
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(step): // a measuring window
		}
		c1, err := s.commands(ctx)
		return float64(c1-c0-1) / time.Since(t0).Seconds(), err
	}
	last, err := sample()
	if err != nil {
		return false, err
	}
	for began := time.Now(); time.Since(began) < limit; {
		r, err := sample()
		if err != nil {
			return false, err
		}
		if r >= 0.85*last {
			return true, nil
		}
		last = r
	}
	return false, nil
}

func (s *scaleRun) idleRow(ctx context.Context, note string) error {
	progress(s.b.out, "scale: idle Redis commands with %d items, %d apis", s.items, len(s.apis))
	if settled, err := s.settle(ctx); err != nil {
		return err
	} else if !settled {
		note = strings.TrimPrefix(note+"; ", "; ") + "the rate was still falling when measured"
	}
	rate, cpu, err := s.idleRate(ctx)
	if err != nil {
		return err
	}
	per := rate / float64(len(s.apis))
	if cpu > 0.9 {
		note = strings.TrimPrefix(note+"; ", "; ") + fmt.Sprintf("Redis saturated (%.0f%% of a core): the figure is a floor", 100*cpu)
	}
	s.b.rows = append(s.b.rows, row{
		name:       fmt.Sprintf("idle Redis commands/s per api instance (%s items, %s)", thousands(float64(s.items)), plural(len(s.apis), "api")),
		text:       fmt.Sprintf("%s/s (all %d: %s/s; Redis CPU %.0f%%)", thousands(per), len(s.apis), thousands(rate), 100*cpu),
		targetText: fmt.Sprintf("≤ %d %s", scaleIdleTarget, mark(per <= scaleIdleTarget)),
		note:       note,
	})
	return nil
}

// ordersRow measures the Redis commands of one GET /api/orders by a caller with 3 orders. The
// apis' loops may saturate Redis meanwhile and the calls displace theirs, so each command
// (INFO commandstats) counts its calls beyond its idle rate (taken just before and after),
// never below zero; the sum is divided by the calls.
func (s *scaleRun) ordersRow(ctx context.Context, addr string) error {
	progress(s.b.out, "scale: GET /api/orders with %d items", s.items)
	hc := &http.Client{Timeout: time.Minute}
	auth := "Bearer " + token(s.b.secret, "scale-orders")
	send := func(method, path string) error {
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+addr+path, strings.NewReader(`{"quantity":1}`))
		req.Header.Set("Authorization", auth)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("bench: %s %s: %d", method, path, resp.StatusCode)
		}
		return nil
	}
	for i := range 3 {
		if err := send("POST", "/api/items/"+s.itemID(i*(s.items/3))+"/purchase"); err != nil {
			return err
		}
	}
	if err := send("GET", "/api/orders"); err != nil { // warm: connections, token cache
		return err
	}
	window := func(during func() error) (map[string]int64, time.Duration, error) {
		c0, err := s.commandStats(ctx)
		if err != nil {
			return nil, 0, err
		}
		t0 := time.Now()
		if err := during(); err != nil {
			return nil, 0, err
		}
		took := time.Since(t0)
		c1, err := s.commandStats(ctx)
		if err != nil {
			return nil, 0, err
		}
		for k := range c1 {
			c1[k] -= c0[k]
		}
		return c1, took, nil
	}
	idle := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.b.opt.idleWindow()): // the window is the measure, not a wait
			return nil
		}
	}
	before, tb, err := window(idle)
	if err != nil {
		return err
	}
	calls := 0
	busy, took, err := window(func() error {
		t0 := time.Now()
		for calls < 5 || time.Since(t0) < s.b.opt.idleWindow() {
			if err := send("GET", "/api/orders"); err != nil {
				return err
			}
			calls++
		}
		return nil
	})
	if err != nil {
		return err
	}
	after, ta, err := window(idle)
	if err != nil {
		return err
	}
	var total float64
	var parts []string
	for name, n := range busy {
		rate := float64(before[name]+after[name]) / (tb + ta).Seconds()
		if extra := float64(n) - rate*took.Seconds(); extra > 0 {
			total += extra
			if per := extra / float64(calls); per >= 0.5 {
				parts = append(parts, fmt.Sprintf("%s %.0f", name, per))
			}
		}
	}
	sort.Strings(parts)
	s.b.rows = append(s.b.rows, row{
		name: fmt.Sprintf("Redis commands per GET /api/orders (%s items)", thousands(float64(s.items))),
		text: fmt.Sprintf("%s commands, %.1f ms a call", thousands(total/float64(calls)), float64(took.Microseconds())/1000/float64(calls)),
		note: fmt.Sprintf("%d calls in %.1f s; per call beyond the idle rate: %s", calls, took.Seconds(), strings.Join(parts, ", ")),
	})
	return nil
}

// commandStats is INFO commandstats: calls by command name (the INFO calls themselves left out).
func (s *scaleRun) commandStats(ctx context.Context) (map[string]int64, error) {
	info, err := s.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	m := map[string]int64{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || name == "info" {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bench: INFO commandstats: %q", line)
		}
		m[name] = v
	}
	return m, nil
}

// plural is "1 api", "3 apis".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}
