//go:build fleet

// Package fleet is the fleet stage of make test: flashsale as in production, several of each
// process (a 3-master Redis Cluster, a 4-partition topic, two apis and two reconcilers built
// with -race, a throw-away Postgres database), driven as clients and operators do (Redis read
// through internal/keyspace), so it holds whatever the key layout inside becomes.
package fleet

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/testing/testenv/procs"
)

const (
	topic      = "flashsale.orders"
	group      = "reconciler" // the reconciler's consumer group (cmd/reconciler)
	adminToken = "fleet-admin-token-0123456789abcdef"
	jwtSecret  = "fleet-jwt-secret-0123456789abcdef0123"
)

// bins are the api and reconciler binaries, built once with -race by TestMain.
var bins procs.Binaries

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "flashsale-fleet-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if bins, err = procs.Build("../../..", dir); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// applied is how many events a reconciler wrote to Postgres (its own counter).
func applied(p *procs.Proc) float64 {
	v, _ := procs.Metric(p.Admin, `flashsale_consumer_events_total{result="applied"}`)
	return v
}

// groupState is the reconciler group as the broker sees it: each member's partitions of the
// topic, and per partition the committed offset and the log end.
type groupState struct {
	members   [][]int
	committed map[int]int64
	end       map[int]int64
}

func describeGroup(ctx context.Context, c *kafka.Client) (groupState, error) {
	var g groupState
	d, err := c.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		return g, err
	}
	if len(d.Groups) != 1 || d.Groups[0].Error != nil {
		return g, fmt.Errorf("describe group: %+v", d.Groups)
	}
	for _, m := range d.Groups[0].Members {
		var parts []int
		for _, tp := range m.MemberAssignments.Topics {
			if tp.Topic == topic {
				parts = append(parts, tp.Partitions...)
			}
		}
		g.members = append(g.members, parts)
	}
	meta, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return g, err
	}
	if len(meta.Topics) != 1 || meta.Topics[0].Error != nil {
		return g, fmt.Errorf("metadata: %+v", meta.Topics)
	}
	var ids []int
	var reqs []kafka.OffsetRequest
	for _, p := range meta.Topics[0].Partitions {
		ids = append(ids, p.ID)
		reqs = append(reqs, kafka.LastOffsetOf(p.ID))
	}
	lo, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return g, err
	}
	g.end = map[int]int64{}
	for _, p := range lo.Topics[topic] {
		if p.Error != nil {
			return g, p.Error
		}
		g.end[p.Partition] = p.LastOffset
	}
	of, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ids}})
	if err != nil {
		return g, err
	}
	g.committed = map[int]int64{}
	for _, p := range of.Topics[topic] {
		if p.Error != nil {
			return g, p.Error
		}
		g.committed[p.Partition] = p.CommittedOffset
	}
	return g, nil
}

// caughtUp reports whether every partition is committed to its end.
func (g groupState) caughtUp() bool {
	for p, end := range g.end {
		if g.committed[p] < end {
			return false
		}
	}
	return len(g.end) > 0
}
