package main

import (
	"context"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// A reconciler started while Postgres refuses it keeps retrying instead of exiting, and goes on
// once Postgres is there: here Postgres sits behind a port that first hangs up on every
// connection, then becomes a toxiproxy proxy to the real server.
func TestWaitsForPostgresAtStart(t *testing.T) {
	dsn := testenv.Postgres(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	upstream := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	attempts := make(chan struct{}, 100)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close() // not Postgres (yet)
			select {
			case attempts <- struct{}{}:
			default:
			}
		}
	}()
	u.Host = addr
	env := map[string]string{"FLASHSALE_POSTGRES_DSN": u.String(), "FLASHSALE_POSTGRES_START_TIMEOUT": "2m"}
	done := make(chan int, 1)
	go func() {
		done <- cli(context.Background(), []string{"migrate"}, func(k string) string { return env[k] })
	}()

	for seen := 0; seen < 3; seen++ {
		select {
		case <-attempts:
		case code := <-done:
			t.Fatalf("reconciler migrate exited (%d) while Postgres was unreachable, want it to retry", code)
		case <-time.After(60 * time.Second):
			t.Fatalf("%d connection attempts within 60 s, want 3", seen)
		}
	}
	ln.Close()
	px := toxiproxy.NewProxy(toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
		"postgres", addr, upstream)
	if err := px.Start(); err != nil {
		t.Fatalf("proxy on %s: %v", addr, err)
	}
	defer px.Stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("reconciler migrate exited %d once Postgres was reachable, want 0", code)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("reconciler migrate did not finish within 90 s of Postgres becoming reachable")
	}
}

// With Postgres never reachable every command gives up after FLASHSALE_POSTGRES_START_TIMEOUT,
// exits 1, and says what it waited for.
func TestGivesUpOnPostgres(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	env := map[string]string{
		"FLASHSALE_POSTGRES_DSN":           "postgres://postgres@" + addr + "/none?sslmode=disable",
		"FLASHSALE_POSTGRES_START_TIMEOUT": "1s",
		"FLASHSALE_REDIS_ADDRS":            "127.0.0.1:1",
		"KAFKA_BROKERS":                    "127.0.0.1:1",
	}
	getenv := func(k string) string { return env[k] }
	for _, argv := range [][]string{{"run"}, {"migrate"}, {"batch"}, {"restore", "--all"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if code := cli(ctx, argv, getenv); code != 1 {
			t.Errorf("reconciler %v with Postgres unreachable: exit %d, want 1", argv, code)
		}
		cancel()
	}
	cfg, err := config.Parse(getenv)
	if err != nil {
		t.Fatal(err)
	}
	err = app.AwaitPostgres(context.Background(), cfg)
	if err == nil || !strings.HasPrefix(err.Error(), "postgres not reachable after 1s and ") ||
		strings.Contains(err.Error(), " and 1 attempts") || !strings.Contains(err.Error(), "FLASHSALE_POSTGRES_START_TIMEOUT") ||
		!strings.Contains(err.Error(), addr) {
		t.Fatalf("error %q: want it to name the wait, the retries, the variable and the cause", err)
	}
}
