package app_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/app"
	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/kafkaconn"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// The api as cmd/api runs it (New, Run on a listener, shutdown by its context): it serves,
// a client sending its body a byte at a time is cut off by the read timeout instead of
// holding a handler, and Run returns once everything it started has stopped.
func TestRunServesAndCutsSlowClients(t *testing.T) {
	_, keys := testenv.Redis(t)
	broker := testenv.Kafka(t, "flashsale.orders", 1)
	cfg, err := config.Parse(func(k string) string {
		return map[string]string{
			"FLASHSALE_REDIS_ADDRS":       testenv.RedisAddr(),
			"FLASHSALE_REDIS_PREFIX":      keys.Prefix,
			"KAFKA_BROKERS":               broker.Addr(),
			"FLASHSALE_HTTP_READ_TIMEOUT": "300ms",
			"FLASHSALE_HTTP_IDLE_TIMEOUT": "300ms",
			"FLASHSALE_PAYMENT_SIM_ADDR":  "127.0.0.1:0", // the default provider, its simulator on a free port
		}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	api, err := app.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- api.Run(ctx, ln) }()

	resp, err := http.Get("http://" + ln.Addr().String() + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz: %v %v", resp, err)
	}
	resp.Body.Close()

	// A login whose body never finishes arriving.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /api/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"us"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(60 * time.Second)) // a bound on the test, not the claim
	reply, err := io.ReadAll(bufio.NewReader(c))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the server still holds a client that stopped sending its body")
	}
	if len(reply) > 0 && !strings.Contains(string(reply), " 400 ") && !strings.Contains(string(reply), " 408 ") {
		t.Fatalf("answer to a stalled body: %q", reply)
	}

	// An idle keep-alive connection is closed by the server after the idle timeout.
	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(idle)
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("keep-alive healthz: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = idle.SetReadDeadline(time.Now().Add(60 * time.Second)) // a bound on the test, not the claim
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("an idle keep-alive connection: read %v, want the server to close it (EOF)", err)
	}

	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// The api's embedded broker requires the deployment's login: a kafka-go client over TCP
// without it (the forged order.paid of a local process) can neither write nor read, and the
// reconciler, configured only with the broker's address, logs in with the same credentials.
func TestEmbeddedBrokerRequiresTheDeploymentLogin(t *testing.T) {
	_, keys := testenv.Redis(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // this deployment's broker directory and login
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kafkaAddr := ln.Addr().String()
	ln.Close()
	env := map[string]string{
		"FLASHSALE_REDIS_ADDRS":         testenv.RedisAddr(),
		"FLASHSALE_REDIS_PREFIX":        keys.Prefix,
		"FLASHSALE_EMBEDDED_KAFKA_ADDR": kafkaAddr,
		"FLASHSALE_PAYMENT_SIM_ADDR":    "127.0.0.1:0",
	}
	cfg, err := config.Parse(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	api, err := app.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()

	if err := testenv.KafkaWrite(kafkaAddr, cfg.KafkaTopic, kafkaconn.Security{}); err == nil {
		t.Fatal("a client without the login wrote to the embedded broker")
	}
	if n, err := testenv.KafkaRead(kafkaAddr, cfg.KafkaTopic, kafkaconn.Security{}); err == nil {
		t.Fatalf("a client without the login read %d events from the embedded broker", n)
	}
	recCfg, err := config.Parse(func(k string) string { return env[k] }) // the reconciler's
	if err != nil {
		t.Fatal(err)
	}
	login, err := recCfg.KafkaSecurity()
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.KafkaWrite(kafkaAddr, cfg.KafkaTopic, login); err != nil {
		t.Fatalf("with the deployment's login: %v", err)
	}
	if n, err := testenv.KafkaRead(kafkaAddr, cfg.KafkaTopic, login); err != nil || n == 0 {
		t.Fatalf("with the deployment's login read %d events, %v", n, err)
	}
}
