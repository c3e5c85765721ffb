package outbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/redisconn"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// discard takes every message (these tests look at the read and its confirmation, not Kafka).
type discard struct{}

func (discard) WriteMessages(context.Context, ...kafka.Message) error { return nil }

// TestReadConfirmsOnlyWhatTheReplicasHold: with a replica required, a read is confirmed by the
// WAIT behind it only when the replica holds what it read. Entries written while it stalls come
// back unconfirmed and publish refuses them after asking the replicas; a blocking read's entries
// never count as confirmed (on Redis 7.0 such a WAIT does not cover what the read delivered).
func TestReadConfirmsOnlyWhatTheReplicasHold(t *testing.T) {
	r := testenv.ReplicatedRedis(t, 1)
	ctx := context.Background()
	rdb := r.AckClient(t, 1, 100*time.Millisecond)
	testenv.WaitFor(t, "a live replica", 30*time.Second, func() bool { return redisconn.Ready(rdb) == nil })
	plain := r.Primary.Client() // writes without waiting for the replica
	keys := keyspace.Space{Prefix: "t" + testenv.Token(4) + ":"}
	relay := New(rdb, keys, discard{}, Options{Block: 50 * time.Millisecond})
	t.Cleanup(func() { relay.rdb.Close() })
	st := relay.streams[1]
	if err := plain.XGroupCreateMkStream(ctx, st.key, relay.opt.Group, "$").Err(); err != nil {
		t.Fatal(err)
	}
	st.grouped, st.retry = true, false
	add := func(n int) {
		t.Helper()
		for range n {
			if err := plain.XAdd(ctx, &redis.XAddArgs{Stream: st.key, Values: []any{"type", "test"}}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	read := func(want int, wantConfirmed bool) []entry {
		t.Helper()
		batch, confirmed, err := relay.read(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		if len(batch) != want || confirmed != wantConfirmed {
			t.Fatalf("read %d entries, confirmed %v; want %d, %v", len(batch), confirmed, want, wantConfirmed)
		}
		return batch
	}

	add(3)
	read(3, true) // entries there, the replica live: the WAIT behind the read confirms them

	r.Replicas[0].Pause()
	paused := true
	defer func() {
		if paused {
			r.Replicas[0].Resume()
		}
	}()
	add(2)
	stalled := read(2, false) // the replica lacks them: not confirmed
	if err := relay.publish(st, stalled, false); !errors.Is(err, errUnpublished) {
		t.Fatalf("publish of entries the replica lacks: %v, want errUnpublished", err)
	}
	if n := relay.Stats().Published; n != 0 {
		t.Fatalf("%d published while the replica lacked them", n)
	}
	r.Replicas[0].Resume()
	paused = false
	r.WaitInSync(t, r.Primary, 1)
	testenv.WaitFor(t, "the replica live again", 30*time.Second, func() bool { return redisconn.Ready(rdb) == nil })
	if err := relay.publish(st, stalled, false); err != nil {
		t.Fatalf("publish once the replica holds them: %v", err)
	}

	add(1)
	read(1, true)
	read(0, false) // nothing there: the stream is idle, and the next read blocks
	if !st.idle {
		t.Fatal("an empty read did not mark the stream idle")
	}
	add(1)
	read(1, false) // a blocking read's entries: publish confirms them
	if st.idle {
		t.Fatal("a read with entries left the stream idle")
	}
}
