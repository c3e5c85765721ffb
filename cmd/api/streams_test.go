package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/testing/testenv"
	"github.com/flashsale/flashsale/internal/testing/testenv/procs"
)

// TestStreamsUnderDescriptorLimit opens 1,000 catalogue streams from 32 addresses against the
// real api binary under a 1,024 open-file limit. Under a hard limit the api keeps descriptors in
// reserve and answers streams past its cap 503 with Retry-After, while /healthz and a purchase
// still answer; under a soft one it raises its own limit and holds all 1,000.
func TestStreamsUnderDescriptorLimit(t *testing.T) {
	// The test's own side holds a connection per stream too.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
	}
	if lim.Cur < 2500 {
		t.Fatalf("this test needs an open-file limit of 2,500 (it is %d): raise ulimit -Hn", lim.Cur)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "api")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name       string
		ulimit     string // bash ulimit options before exec
		held       int    // streams of the 1,000 the api holds
		refusedAll bool   // whether the rest are 503
	}{
		{"hard 1024", "ulimit -n 1024", 728, true},
		{"soft 1024 under hard 4096", "ulimit -Sn 1024 && ulimit -Hn 4096", 1000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, keys := testenv.Redis(t)
			broker := testenv.Kafka(t, "flashsale.orders", 1)
			env := procs.Env{RedisAddrs: testenv.RedisAddr(), RedisPrefix: keys.Prefix, KafkaBrokers: broker.Addr(),
				KafkaTopic: "flashsale.orders", JWTSecret: "streams-test-secret-0123456789abcdef",
				AdminToken: "streams-test-admin-token-0123", ReservationTTL: time.Minute}
			port := strconv.Itoa(procs.FreePort(t))
			p := procs.Start(t, dir, "api", "/bin/bash", env.List("FLASHSALE_HTTP_ADDR=127.0.0.1:"+port),
				"-c", tc.ulimit+` && exec "$0"`, bin)
			p.URL = "http://127.0.0.1:" + port
			p.WaitReady(t)
			if st := call(t, p.URL, "PUT", "/api/admin/items/phone", env.AdminToken,
				`{"name":"Phone","category":"phones","price_cents":100,"stock":10,"per_user_limit":1}`); st != http.StatusCreated {
				t.Fatalf("create item: %d", st)
			}

			var held []net.Conn
			t.Cleanup(func() {
				for _, c := range held {
					c.Close()
				}
			})
			counts := map[int]int{}
			// 32 from one address (the per-client cap), then the 33rd is refused.
			for range 32 {
				st, _, c := stream(t, p.URL, "127.0.2.1")
				counts[st]++
				if c != nil {
					held = append(held, c)
				}
			}
			if st, ra, _ := stream(t, p.URL, "127.0.2.1"); st != http.StatusTooManyRequests || ra == "" {
				t.Fatalf("the 33rd stream of one address: %d (Retry-After %q), want 429 with Retry-After", st, ra)
			}
			// The other 968 from 31 more addresses, at most 32 each.
			for i := range 968 {
				st, ra, c := stream(t, p.URL, fmt.Sprintf("127.0.3.%d", 1+i%31))
				counts[st]++
				if c != nil {
					held = append(held, c)
				} else if st == http.StatusServiceUnavailable && ra == "" {
					t.Fatal("a 503 for a stream without Retry-After")
				}
			}
			want := map[int]int{http.StatusOK: tc.held}
			if tc.refusedAll {
				want[http.StatusServiceUnavailable] = 1000 - tc.held
			}
			if fmt.Sprint(counts) != fmt.Sprint(want) {
				t.Fatalf("1,000 streams answered %v, want %v", counts, want)
			}
			// Every stream held is alive: each got its first event.
			if st := call(t, p.URL, "GET", "/healthz", "", ""); st != http.StatusOK {
				t.Fatalf("/healthz beside %d streams: %d", len(held), st)
			}
			token := login(t, p.URL, "alice")
			if st := call(t, p.URL, "POST", "/api/items/phone/purchase", token, `{"quantity":1}`); st != http.StatusCreated {
				t.Fatalf("purchase beside %d streams: %d", len(held), st)
			}
			if !tc.refusedAll {
				return
			}
			// Ten clients go: their places are free at once (the heartbeat is 15 s away).
			for _, c := range held[:10] {
				c.Close()
			}
			held = held[10:]
			got := 0
			procs.WaitFor(t, "ten new streams after ten closed", 10*time.Second, func() bool {
				st, _, c := stream(t, p.URL, "127.0.4.1")
				if c != nil {
					held = append(held, c)
					got++
				} else if st != http.StatusServiceUnavailable {
					t.Fatalf("a new stream: %d", st)
				}
				return got == 10
			})
			if st, _, _ := stream(t, p.URL, "127.0.4.2"); st != http.StatusServiceUnavailable {
				t.Fatalf("full again, yet a stream got %d", st)
			}
		})
	}
}

// stream opens GET /api/items/stream from the local address ip (127.0.0.0/8 is all this
// host's) and returns the status, Retry-After, and for a 200 the connection, once the first
// items event has arrived.
func stream(t *testing.T, base, ip string) (int, string, net.Conn) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", base[len("http://"):])
	if err != nil {
		t.Fatalf("dial from %s: %v", ip, err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprint(c, "GET /api/items/stream HTTP/1.1\r\nHost: api\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("stream from %s: %v", ip, err)
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After"), nil
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream from %s ended before its first event: %v", ip, err)
		}
		if len(line) > 6 && line[:6] == "data: " {
			break
		}
	}
	_ = c.SetDeadline(time.Time{})
	return resp.StatusCode, "", c
}

func call(t *testing.T, base, method, path, token, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, base+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func login(t *testing.T, base, user string) string {
	t.Helper()
	resp, err := http.Post(base+"/api/login", "application/json", bytes.NewBufferString(`{"user":"`+user+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Token string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Token == "" {
		t.Fatalf("login: %d %v", resp.StatusCode, err)
	}
	return body.Token
}
