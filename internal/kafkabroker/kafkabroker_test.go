package kafkabroker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/kafkabroker"
	"github.com/flashsale/flashsale/internal/kafkaconn"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestRestartKeepsTheLog: a stopped broker comes back on the same address with its messages
// (the outage tests rely on it), and the topic has the configured partitions.
func TestRestartKeepsTheLog(t *testing.T) {
	b, err := kafkabroker.Start(kafkabroker.Options{Addr: "127.0.0.1:0", Topic: "t", Partitions: 4, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	addr := b.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := &kafka.Writer{Addr: kafka.TCP(addr), Topic: "t", RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("k"), Value: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	b.Stop()
	if err := b.Restart(); err != nil {
		t.Fatal(err)
	}
	if b.Addr() != addr {
		t.Fatalf("restarted on %s, was %s", b.Addr(), addr)
	}
	client := &kafka.Client{Addr: kafka.TCP(addr), Transport: &kafka.Transport{}}
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{"t"}})
	if err != nil || len(meta.Topics) != 1 || len(meta.Topics[0].Partitions) != 4 {
		t.Fatalf("metadata after restart: %+v %v", meta, err)
	}
	var reqs []kafka.OffsetRequest
	for p := range 4 {
		reqs = append(reqs, kafka.LastOffsetOf(p))
	}
	offs, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{"t": reqs}})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, p := range offs.Topics["t"] {
		total += p.LastOffset
	}
	if total != 1 {
		t.Fatalf("%d messages after restart, want 1", total)
	}
	b.Close()
	if err := b.Restart(); !errors.Is(err, kafkabroker.ErrStopped) {
		t.Fatalf("restart after close: %v", err)
	}
}

// The broker has no TLS, so it listens on loopback only: an address of
// every interface or of another host is refused before anything listens.
func TestLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		b, err := kafkabroker.Start(kafkabroker.Options{Addr: addr, Topic: "t"})
		if err == nil {
			b.Close()
			t.Errorf("Start(%q) listened; want a refusal", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		b, err := kafkabroker.Start(kafkabroker.Options{Addr: addr, Topic: "t"})
		if err != nil {
			t.Errorf("Start(%q): %v", addr, err)
			continue
		}
		b.Close()
	}
}

// A broker started with a login takes no produce and serves no fetch, metadata or group to a
// kafka-go client over TCP that has not logged in, or that logs in with another password; the
// same client with the login writes and reads back. It keeps requiring the login, with the
// password of the new start, after a restart from its data directory.
func TestLoginRequired(t *testing.T) {
	dir := t.TempDir()
	login := kafkaconn.Security{Mechanism: "SCRAM-SHA-256", Username: "flashsale", Password: "first-password-0123456789"}
	b, err := kafkabroker.Start(kafkabroker.Options{Addr: "127.0.0.1:0", Topic: "t", DataDir: dir, Login: login})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	checkAccess(t, b.Addr(), login, "first start")

	b.Close() // a new start (a restarted api) with a new password: the old one is refused
	login.Password = "second-password-0123456789"
	b, err = kafkabroker.Start(kafkabroker.Options{Addr: "127.0.0.1:0", Topic: "t", DataDir: dir, Login: login})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	checkAccess(t, b.Addr(), login, "second start")
	old := login
	old.Password = "first-password-0123456789"
	if err := testenv.KafkaWrite(b.Addr(), "t", old); err == nil {
		t.Fatal("second start: the first start's password still writes")
	}
}

// checkAccess: without the login nothing is written or read; with it both work.
func checkAccess(t *testing.T, addr string, login kafkaconn.Security, when string) {
	t.Helper()
	for _, s := range []kafkaconn.Security{{}, {Mechanism: login.Mechanism, Username: login.Username, Password: "wrong"}} {
		if err := testenv.KafkaWrite(addr, "t", s); err == nil {
			t.Fatalf("%s: a client logged in as %q wrote to the broker", when, s.Username)
		}
		if n, err := testenv.KafkaRead(addr, "t", s); err == nil {
			t.Fatalf("%s: a client logged in as %q read %d messages", when, s.Username, n)
		}
	}
	if err := testenv.KafkaWrite(addr, "t", login); err != nil {
		t.Fatalf("%s: with the login: %v", when, err)
	}
	if n, err := testenv.KafkaRead(addr, "t", login); err != nil || n == 0 {
		t.Fatalf("%s: with the login read %d messages, %v", when, n, err)
	}
}
