package kafkabroker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/kafkabroker"
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

// Issue 31: the broker asks nobody to log in, so it listens on loopback only: an address of
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
