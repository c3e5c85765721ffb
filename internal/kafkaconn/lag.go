package kafkaconn

import (
	"context"
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"
)

// ConsumerGroup is the Kafka consumer group of the reconciler: its consumer commits in it, and
// the lag that Prometheus (the reconciler's flashsale_consumer_lag_messages), the sale
// monitor (the api) and batch reconciliation report is this group's.
const ConsumerGroup = "reconciler"

// ErrNoTopic means the event topic does not exist (yet) on the brokers.
var ErrNoTopic = errors.New("kafka: event topic not found")

// Lag is group's lag on topic now, the one definition every report uses: over the topic's
// partitions, the log end offset minus the group's committed offset, or minus the log start
// when the group has committed nothing there (messages already deleted by retention can
// never be consumed, so they are not lag). Three requests: metadata, offsets, committed.
func Lag(ctx context.Context, client *kafka.Client, topic, group string) (int64, error) {
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, fmt.Errorf("kafka lag: metadata: %w", err)
	}
	if len(meta.Topics) == 0 || meta.Topics[0].Error != nil {
		return 0, ErrNoTopic
	}
	var reqs []kafka.OffsetRequest
	var ids []int
	for _, p := range meta.Topics[0].Partitions {
		ids = append(ids, p.ID)
		reqs = append(reqs, kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
	}
	ends, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return 0, fmt.Errorf("kafka lag: list offsets: %w", err)
	}
	committed, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ids}})
	if err != nil {
		return 0, fmt.Errorf("kafka lag: offset fetch: %w", err)
	}
	// A group that never committed is unknown to some brokers (kfake): it has read nothing.
	if committed.Error != nil && !errors.Is(committed.Error, kafka.GroupIdNotFound) {
		return 0, fmt.Errorf("kafka lag: offset fetch: %w", committed.Error)
	}
	at := map[int]int64{}
	for _, p := range committed.Topics[topic] {
		at[p.Partition] = p.CommittedOffset
	}
	var lag int64
	for _, p := range ends.Topics[topic] {
		if p.Error != nil {
			return 0, fmt.Errorf("kafka lag: partition %d: %w", p.Partition, p.Error)
		}
		from, ok := at[p.Partition]
		if !ok || from < 0 || from < p.FirstOffset {
			from = p.FirstOffset
		}
		lag += max(p.LastOffset-from, 0)
	}
	return lag, nil
}
