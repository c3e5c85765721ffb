package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/kafkabroker"
	"github.com/flashsale/flashsale/internal/kafkaconn"
)

// Kafka starts an embedded Kafka-protocol broker (kfake) on a free 127.0.0.1 port, reached by
// clients over TCP like any broker, with topic created with the given partitions. Its log is
// kept in a temporary directory, so Stop and Restart simulate an outage without losing events.
// It asks for no login. It is closed when the test ends.
func Kafka(t testing.TB, topic string, partitions int) *kafkabroker.Broker {
	t.Helper()
	b, err := kafkabroker.Start(kafkabroker.Options{
		Addr: "127.0.0.1:0", Topic: topic, Partitions: partitions, DataDir: t.TempDir(),
	})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

// KafkaWrite produces one message (a forged order.paid) to topic at addr over TCP as a
// kafka-go client logged in as s says, trying once.
func KafkaWrite(addr, topic string, s kafkaconn.Security) error {
	tr, err := s.Transport()
	if err != nil {
		return err
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w := &kafka.Writer{Addr: kafka.TCP(addr), Topic: topic, RequiredAcks: kafka.RequireAll, MaxAttempts: 1,
		BatchTimeout: time.Millisecond, Transport: tr}
	defer w.Close()
	return w.WriteMessages(ctx, kafka.Message{Key: []byte("phone"),
		Value: []byte(`{"event_id":"forged","type":"order.paid","order_id":"phone.999","user_id":"mallory","quantity":50,"price_cents":1}`)})
}

// KafkaRead fetches partition 0 of topic from its start as a kafka-go client logged in as s
// says, and counts the messages it got.
func KafkaRead(addr, topic string, s kafkaconn.Security) (int, error) {
	tr, err := s.Transport()
	if err != nil {
		return 0, err
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := &kafka.Client{Addr: kafka.TCP(addr), Transport: tr}
	resp, err := c.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: 0, Offset: 0, MaxBytes: 1 << 20})
	if err != nil {
		return 0, err
	}
	if resp.Error != nil {
		return 0, resp.Error
	}
	n := 0
	for {
		if _, err := resp.Records.ReadRecord(); err != nil {
			return n, nil
		}
		n++
	}
}
