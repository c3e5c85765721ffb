package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/kafkaconn"
)

// Pipeline tells how far the consumer has applied the event topic: Mark takes the topic's end
// now, Reached reports whether everything before a mark has been applied to Postgres (the
// consumer commits offsets only after its transaction commits). Lag is the consumer's lag now
// (-1 when unknown).
type Pipeline interface {
	Mark(ctx context.Context) (Mark, error)
	Reached(ctx context.Context, m Mark) (bool, error)
	Lag(ctx context.Context) (int64, error)
}

// Mark is the log end offset of each partition at one moment.
type Mark map[int]int64

// KafkaPipeline reads the topic's log end offsets and the consumer group's committed offsets.
type KafkaPipeline struct {
	topic, group string
	client       *kafka.Client
}

// NewKafkaPipeline watches group's progress on topic; transport (nil: kafka-go's default)
// carries the brokers' login and TLS.
func NewKafkaPipeline(brokers []string, topic, group string, transport kafka.RoundTripper) *KafkaPipeline {
	return &KafkaPipeline{topic: topic, group: group,
		client: &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 5 * time.Second, Transport: transport}}
}

func (k *KafkaPipeline) partitions(ctx context.Context) ([]int, error) {
	meta, err := k.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{k.topic}})
	if err != nil {
		return nil, fmt.Errorf("reconcile: kafka metadata: %w", err)
	}
	if len(meta.Topics) == 0 || meta.Topics[0].Error != nil {
		return nil, fmt.Errorf("reconcile: kafka topic %s not found", k.topic)
	}
	var ids []int
	for _, p := range meta.Topics[0].Partitions {
		ids = append(ids, p.ID)
	}
	return ids, nil
}

// Mark returns every partition's log end offset.
func (k *KafkaPipeline) Mark(ctx context.Context) (Mark, error) {
	ids, err := k.partitions(ctx)
	if err != nil {
		return nil, err
	}
	reqs := make([]kafka.OffsetRequest, len(ids))
	for i, id := range ids {
		reqs[i] = kafka.LastOffsetOf(id)
	}
	res, err := k.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{k.topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("reconcile: kafka offsets: %w", err)
	}
	m := Mark{}
	for _, p := range res.Topics[k.topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("reconcile: kafka partition %d: %w", p.Partition, p.Error)
		}
		m[p.Partition] = p.LastOffset
	}
	return m, nil
}

func (k *KafkaPipeline) committed(ctx context.Context, ids []int) (map[int]int64, error) {
	res, err := k.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: k.group, Topics: map[string][]int{k.topic: ids}})
	if err != nil {
		return nil, fmt.Errorf("reconcile: kafka committed offsets: %w", err)
	}
	if res.Error != nil {
		return nil, fmt.Errorf("reconcile: kafka committed offsets: %w", res.Error)
	}
	at := map[int]int64{}
	for _, p := range res.Topics[k.topic] {
		at[p.Partition] = p.CommittedOffset
	}
	return at, nil
}

// Reached reports whether the group committed every partition up to the mark.
func (k *KafkaPipeline) Reached(ctx context.Context, m Mark) (bool, error) {
	ids := make([]int, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	at, err := k.committed(ctx, ids)
	if err != nil {
		return false, err
	}
	for id, end := range m {
		if end > 0 && at[id] < end {
			return false, nil
		}
	}
	return true, nil
}

// Lag is the group's messages not yet committed, over all partitions (kafkaconn.Lag: the
// definition Prometheus and the monitor use too); -1 when unknown.
func (k *KafkaPipeline) Lag(ctx context.Context) (int64, error) {
	lag, err := kafkaconn.Lag(ctx, k.client, k.topic, k.group)
	if err != nil {
		return -1, fmt.Errorf("reconcile: %w", err)
	}
	return lag, nil
}
