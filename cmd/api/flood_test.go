package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/testing/testenv"
	"github.com/flashsale/flashsale/internal/testing/testenv/procs"
)

// TestConnectionFloodLeavesHealthz holds 1,024 half-open connections from 16 addresses against
// the real api binary under a 512 open-file limit, redialling each one closed: the api keeps
// within its cap (refusing the rest at once, counted), and /healthz, /readyz, /metrics and an
// admin route answer on both listeners. /healthz latencies are logged, not asserted.
func TestConnectionFloodLeavesHealthz(t *testing.T) {
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
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatalf("this test needs prlimit (util-linux): %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "api")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	_, keys := testenv.Redis(t)
	broker := testenv.Kafka(t, "flashsale.orders", 1)
	env := procs.Env{RedisAddrs: testenv.RedisAddr(), RedisPrefix: keys.Prefix, KafkaBrokers: broker.Addr(),
		KafkaTopic: "flashsale.orders", JWTSecret: "flood-test-secret-0123456789abcdef",
		AdminToken: "flood-test-admin-token-0123", ReservationTTL: time.Minute}
	port := strconv.Itoa(procs.FreePort(t))
	ops := "127.0.0.1:" + strconv.Itoa(procs.FreePort(t))
	p := procs.Start(t, dir, "api", prlimit, env.List("FLASHSALE_HTTP_ADDR=127.0.0.1:"+port, "FLASHSALE_OPS_ADDR="+ops),
		"--nofile=512:512", bin)
	p.URL = "http://127.0.0.1:" + port
	p.WaitReady(t)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for i := range 1024 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			halfOpen(ctx, p.URL[len("http://"):], fmt.Sprintf("127.0.6.%d", 1+i%16))
		}()
	}
	procs.WaitFor(t, "connections refused over the cap", 60*time.Second, func() bool {
		return refused(t, p.URL) > 100
	})

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(url, token string) int {
		req, _ := http.NewRequest("GET", url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s during the flood: %v", url, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	var took []time.Duration
	for range 50 {
		began := time.Now()
		if st := get(p.URL+"/healthz", ""); st != http.StatusOK {
			t.Fatalf("/healthz during the flood: %d", st)
		}
		took = append(took, time.Since(began))
	}
	for _, path := range []string{"/readyz", "/metrics"} {
		if st := get(p.URL+path, ""); st != http.StatusOK {
			t.Fatalf("%s during the flood: %d", path, st)
		}
		if st := get("http://"+ops+path, ""); st != http.StatusOK {
			t.Fatalf("%s on FLASHSALE_OPS_ADDR during the flood: %d", path, st)
		}
	}
	if st := get(p.URL+"/api/admin/stats", env.AdminToken); st != http.StatusOK {
		t.Fatalf("an admin route during the flood: %d", st)
	}
	if p.Logged("too many open files") {
		t.Fatal("the api ran out of descriptors (accept: too many open files)")
	}
	slices.Sort(took)
	t.Logf("/healthz under a flood of 1,024 half-open connections from 16 addresses (limit 512): p50 %v, p90 %v, max %v; %d refused so far",
		took[len(took)/2], took[len(took)*9/10], took[len(took)-1], refused(t, p.URL))
}

// halfOpen holds one connection from ip that sends a single header line and never finishes
// its request, dialling again whenever the api closes it, until ctx ends.
func halfOpen(ctx context.Context, addr, ip string) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	for ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			continue
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\n"); err == nil {
			_, _ = io.Copy(io.Discard, c) // until the api closes it
		}
		stop()
		c.Close()
	}
}

var refusedLine = regexp.MustCompile(`(?m)^flashsale_http_connections_refused_total\{cap="total"\} (\S+)$`)

// refused reads the api's count of connections refused over its total cap.
func refused(t *testing.T, base string) int {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := refusedLine.FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseFloat(string(m[1]), 64)
	return int(n)
}
