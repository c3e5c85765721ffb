package testenv

import (
	"testing"

	"github.com/flashsale/flashsale/internal/kafkabroker"
)

// Kafka starts an embedded Kafka-protocol broker (kfake) on a free 127.0.0.1 port, reached by
// clients over TCP like any broker, with topic created with the given partitions. Its log is
// kept in a temporary directory, so Stop and Restart simulate an outage without losing events.
// It is closed when the test ends.
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
