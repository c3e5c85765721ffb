package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

const liveAdminToken = "live-test-admin-token-0123456789"

// running is one api started with Run on a free port.
type running struct {
	t      *testing.T
	api    *app.API
	base   string
	signal func()       // starts the shutdown (SIGTERM) without waiting for it
	stop   func() error // ends Run and returns its error
}

// runAPI starts an api as cmd/api does, with env on top of the test's Redis prefix and Kafka.
func runAPI(t *testing.T, prefix, brokers string, env map[string]string) *running {
	t.Helper()
	return runAPIWith(t, prefix, brokers, env, nil)
}

// runAPIWith is runAPI with before called on the api between New and Run (test routes, hooks).
func runAPIWith(t *testing.T, prefix, brokers string, env map[string]string, before func(*app.API)) *running {
	t.Helper()
	vars := map[string]string{
		"FLASHSALE_REDIS_ADDRS":      testenv.RedisAddr(),
		"FLASHSALE_REDIS_PREFIX":     prefix,
		"KAFKA_BROKERS":              brokers,
		"FLASHSALE_ADMIN_TOKEN":      liveAdminToken,
		"FLASHSALE_JWT_SECRET":       "live-test-secret-0123456789abcdef0123",
		"FLASHSALE_SHUTDOWN_TIMEOUT": "60s",
		"FLASHSALE_PAYMENT_SIM_ADDR": "127.0.0.1:0", // the default provider's simulator, on a free port
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := config.Parse(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	api, err := app.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	if before != nil {
		before(api)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- api.Run(ctx, ln) }()
	var once sync.Once
	var runErr error
	r := &running{t: t, api: api, base: "http://" + ln.Addr().String(), signal: cancel, stop: func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}}
	t.Cleanup(func() { _ = r.stop() })
	return r
}

// call sends a JSON request and decodes the JSON answer into out (when not nil).
func (r *running) call(method, path, token string, body any, out any) int {
	r.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, r.base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			r.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode
}

func (r *running) putItem(id string, stock int) {
	r.t.Helper()
	if st := r.call("PUT", "/api/admin/items/"+id, liveAdminToken, map[string]any{
		"name": "Item " + id, "category": "phones", "price_cents": 500, "stock": stock, "per_user_limit": 5,
	}, nil); st != http.StatusCreated {
		r.t.Fatalf("PUT %s: %d", id, st)
	}
}

func (r *running) adjust(id string, delta int) {
	r.t.Helper()
	if st := r.call("POST", "/api/admin/items/"+id+"/stock", liveAdminToken, map[string]any{"delta": delta}, nil); st != http.StatusOK {
		r.t.Fatalf("stock %s: %d", id, st)
	}
}

// sseEvent is one message of a stream: an event with data, or a comment.
type sseEvent struct {
	comment bool
	name    string
	data    string
}

// stream is one open GET /api/items/stream; its messages arrive on events, and done closes
// (with the read's error in err) when the server ends it.
type stream struct {
	resp   *http.Response
	events chan sseEvent
	done   chan struct{}
	err    error
}

func (r *running) openStream() *stream {
	r.t.Helper()
	resp, err := http.Get(r.base + "/api/items/stream")
	if err != nil {
		r.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		r.t.Fatalf("stream: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &stream{resp: resp, events: make(chan sseEvent, 1000), done: make(chan struct{})}
	r.t.Cleanup(func() { resp.Body.Close() })
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" || ev.data != "" {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				s.events <- sseEvent{comment: true}
			case strings.HasPrefix(line, "event: "):
				ev.name = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data += line[len("data: "):]
			}
		}
		s.err = sc.Err()
	}()
	return s
}

// waitItems waits for an items event in which item id has stock_left want.
func (s *stream) waitItems(t *testing.T, id string, want int64) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev := <-s.events:
			if ev.comment || ev.name != "items" {
				continue
			}
			var body struct {
				Items []struct {
					ID        string `json:"id"`
					StockLeft int64  `json:"stock_left"`
				} `json:"items"`
			}
			if err := json.Unmarshal([]byte(ev.data), &body); err != nil {
				t.Fatalf("items event data is not the catalogue: %v: %q", err, ev.data)
			}
			for _, it := range body.Items {
				if it.ID == id && it.StockLeft == want {
					return
				}
			}
		case <-s.done:
			t.Fatalf("stream ended while waiting for %s at %d: %v", id, want, s.err)
		case <-deadline:
			t.Fatalf("no items event with %s at %d", id, want)
		}
	}
}

// waitComment waits for a heartbeat comment.
func (s *stream) waitComment(t *testing.T) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev := <-s.events:
			if ev.comment {
				return
			}
		case <-s.done:
			t.Fatalf("stream ended while waiting for a heartbeat: %v", s.err)
		case <-deadline:
			t.Fatal("no heartbeat comment")
		}
	}
}

// The catalogue stream through the real server: several subscribers start with the
// catalogue, a stock change reaches every one of them, heartbeats flow, the server's short
// read and write timeouts do not cut a stream, and shutdown ends every stream cleanly (the
// chunked body terminates; Run returns).
func TestCatalogueStream(t *testing.T) {
	_, keys := testenv.Redis(t)
	broker := testenv.Kafka(t, "flashsale.orders", 1)
	const timeouts = 500 * time.Millisecond
	r := runAPI(t, keys.Prefix, broker.Addr(), map[string]string{
		"FLASHSALE_HTTP_READ_TIMEOUT":  timeouts.String(),
		"FLASHSALE_HTTP_WRITE_TIMEOUT": timeouts.String(),
		"FLASHSALE_STREAM_HEARTBEAT":   "100ms",
	})
	r.putItem("phone", 10)
	opened := time.Now()
	streams := make([]*stream, 6)
	for i := range streams {
		streams[i] = r.openStream()
	}
	for _, s := range streams {
		s.waitItems(t, "phone", 10) // the first event is the catalogue
		s.waitComment(t)
	}
	// Well past both timeouts since the streams opened, a change still reaches every one.
	time.Sleep(time.Until(opened.Add(3 * timeouts)))
	r.adjust("phone", 5)
	for _, s := range streams {
		s.waitItems(t, "phone", 15)
	}
	if open, _ := r.api.Server().StreamCounts(); open != len(streams) {
		t.Fatalf("%d streams open, want %d", open, len(streams))
	}

	if err := r.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for i, s := range streams {
		select {
		case <-s.done:
		case <-time.After(20 * time.Second):
			t.Fatalf("stream %d still open after shutdown", i)
		}
		if s.err != nil {
			t.Fatalf("stream %d did not end cleanly: %v", i, s.err)
		}
	}
}

// stats is the part of GET /api/admin/stats this test reads.
type statsReply struct {
	T         []int64             `json:"t"`
	Instances []int64             `json:"instances"`
	Requests  []int64             `json:"requests"`
	Purchases map[string][]int64  `json:"purchases"`
	StockLeft map[string][]*int64 `json:"stock_left"`
	LatencyMS map[string][]*float64
	Outbox    []*int64 `json:"outbox_backlog"`
}

func sum(xs []int64) (n int64) {
	for _, x := range xs {
		n += x
	}
	return n
}

// Two api instances on one Redis prefix: the monitor's series, read from either, hold both
// instances' purchases (by outcome), the shared stock gauge, and count both instances.
func TestStatsAcrossInstances(t *testing.T) {
	_, keys := testenv.Redis(t)
	broker := testenv.Kafka(t, "flashsale.orders", 1)
	a := runAPI(t, keys.Prefix, broker.Addr(), nil)
	b := runAPI(t, keys.Prefix, broker.Addr(), nil)
	a.putItem("drop", 4)
	buy := func(r *running, user string) int {
		var login struct {
			Token string `json:"token"`
		}
		if st := r.call("POST", "/api/login", "", map[string]any{"user": user}, &login); st != http.StatusOK {
			t.Fatalf("login: %d", st)
		}
		return r.call("POST", "/api/items/drop/purchase", login.Token, map[string]any{"quantity": 1}, nil)
	}
	// Six shoppers, three through each instance: four reserve, two find it sold out. The
	// instance that sells the last unit only learns it on its own write, so the outcome of each
	// call is what the series must count, whichever instance answered it.
	want := map[int]int64{}
	for i := range 6 {
		r := a
		if i%2 == 1 {
			r = b
		}
		want[buy(r, fmt.Sprintf("shopper%d", i))]++
	}
	if want[http.StatusCreated] != 4 || want[http.StatusConflict] != 2 {
		t.Fatalf("purchase answers %v, want 4 created and 2 sold out", want)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var s statsReply
		if st := b.call("GET", "/api/admin/stats?seconds=60", liveAdminToken, nil, &s); st != http.StatusOK {
			t.Fatalf("stats: %d", st)
		}
		var two bool
		for _, n := range s.Instances {
			two = two || n == 2
		}
		stock := s.StockLeft["drop"]
		var lastStock *int64
		if len(stock) > 0 {
			lastStock = stock[len(stock)-1]
		}
		if two && sum(s.Purchases["reserved"]) == 4 && sum(s.Purchases["sold_out"]) == 2 &&
			lastStock != nil && *lastStock == 0 && sum(s.Requests) >= 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("series never showed both instances' purchases: instances %v reserved %v sold_out %v stock %v",
				s.Instances, s.Purchases["reserved"], s.Purchases["sold_out"], lastStock)
		}
		time.Sleep(200 * time.Millisecond) // polling for a condition, with a deadline
	}
	// Shoppers may not read it; bad input is a 400.
	if st := a.call("GET", "/api/admin/stats?seconds=0", liveAdminToken, nil, nil); st != http.StatusBadRequest {
		t.Fatalf("seconds=0: %d, want 400", st)
	}
	if st := a.call("GET", "/api/admin/stats", "", nil, nil); st != http.StatusUnauthorized {
		t.Fatalf("no token: %d, want 401", st)
	}
}
