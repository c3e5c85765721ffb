package kafkaconn_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/kafkaconn"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestLag: a group that committed nothing lags by every message; commits on some partitions
// take exactly those messages off; a missing topic is ErrNoTopic. Against a real
// Kafka-protocol broker over TCP.
func TestLag(t *testing.T) {
	const topic = "lag-test"
	b := testenv.Kafka(t, topic, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(b.Addr()), Timeout: 5 * time.Second, Transport: tr}

	// 3 messages on partition 0, 2 on partition 1.
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: topic, Transport: tr, RequiredAcks: kafka.RequireAll,
		Balancer: kafka.BalancerFunc(func(m kafka.Message, _ ...int) int { return int(m.Key[0] - '0') })}
	defer w.Close()
	var msgs []kafka.Message
	for i, p := range []int{0, 0, 0, 1, 1} {
		msgs = append(msgs, kafka.Message{Key: []byte(strconv.Itoa(p)), Value: []byte(strconv.Itoa(i))})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	group := "lag-test-" + testenv.Token(4)
	if lag, err := kafkaconn.Lag(ctx, client, topic, group); err != nil || lag != 5 {
		t.Fatalf("nothing committed: lag %d, %v; want 5", lag, err)
	}
	// The group commits offset 2 on partition 0 (two messages read) and nothing on 1.
	g, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{ID: group, Brokers: []string{b.Addr()}, Topics: []string{topic},
		Dialer: &kafka.Dialer{Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	gen, err := g.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := gen.CommitOffsets(map[string]map[int]int64{topic: {0: 2}}); err != nil {
		t.Fatal(err)
	}
	if lag, err := kafkaconn.Lag(ctx, client, topic, group); err != nil || lag != 3 {
		t.Fatalf("after a commit at 2 on partition 0: lag %d, %v; want 3", lag, err)
	}
	if _, err := kafkaconn.Lag(ctx, client, "no-such-topic", group); !errors.Is(err, kafkaconn.ErrNoTopic) {
		t.Fatalf("missing topic: %v, want ErrNoTopic", err)
	}
}
