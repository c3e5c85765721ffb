package outbox

import (
	"context"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestAckScriptReplies: every reply of outbox/ack.lua, with two consumers of the group as two
// relays. Whatever the order of their acknowledgements, the stream keeps exactly the entries
// not acknowledged yet; bad arguments are refused before anything is acknowledged.
func TestAckScriptReplies(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	stream := keys.Shard(0).Outbox()
	var ids []string
	for i := range 12 {
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"n", i}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rdb.XGroupCreate(ctx, stream, "relay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	read := func(consumer string, n int64) {
		if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "relay", Consumer: consumer,
			Streams: []string{stream, ">"}, Count: n}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	read("a", 4) // ids[0:4]
	read("b", 4) // ids[4:8]; ids[8:12] not delivered yet
	ack := func(ids ...string) []any {
		t.Helper()
		args := []any{"relay"}
		for _, id := range ids {
			args = append(args, id)
		}
		reply, err := ackScript.Run(ctx, rdb, []string{stream}, args...).Slice()
		if err != nil {
			t.Fatalf("ack %v: %v", ids, err)
		}
		return reply
	}
	left := func(want ...string) {
		t.Helper()
		msgs, err := rdb.XRange(ctx, stream, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		got := []string{}
		for _, m := range msgs {
			got = append(got, m.ID)
		}
		if want == nil {
			want = []string{}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("stream holds %v, want %v", got, want)
		}
	}

	for _, bad := range [][]any{{"relay"}, {"relay", "1-0", "x"}, {"relay", ids[0], "9"}} {
		if err := ackScript.Run(ctx, rdb, []string{stream}, bad...).Err(); err == nil {
			t.Fatalf("ack %v: accepted", bad)
		}
	}
	if p := rdb.XPending(ctx, stream, "relay").Val(); p.Count != 8 {
		t.Fatalf("a refused call acknowledged: %d pending, want 8", p.Count)
	}

	// b acknowledges while a holds older entries: nothing to trim, b's ids are deleted.
	if got, want := ack(ids[4:8]...), []any{int64(4), int64(0), int64(4)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("b's acknowledgement above a's pending entries: %v, want %v", got, want)
	}
	left(append(append([]string{}, ids[0:4]...), ids[8:12]...)...)
	// a acknowledges the older half of its entries: trimmed up to its oldest still pending.
	if got, want := ack(ids[0:2]...), []any{int64(2), int64(2), int64(0)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("a's oldest entries: %v, want %v", got, want)
	}
	left(append(append([]string{}, ids[2:4]...), ids[8:12]...)...)
	// a acknowledges the rest: none pending, trimmed up to the last delivered; the undelivered stay.
	if got, want := ack(ids[2:4]...), []any{int64(2), int64(2), int64(0)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("a's last entries: %v, want %v", got, want)
	}
	left(ids[8:12]...)
	// Run twice: nothing acknowledged, trimmed or deleted.
	if got, want := ack(ids[2:4]...), []any{int64(0), int64(0), int64(0)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the same acknowledgement again: %v, want %v", got, want)
	}
	// Ids compare as numbers: as strings, "9-0" would sort after "10-0" and "10-9" after "10-10".
	num := keys.Shard(1).Outbox()
	for _, id := range []string{"9-0", "10-9", "10-10", "11-0"} {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: num, ID: id, Values: []any{"n", id}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.XGroupCreate(ctx, num, "relay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	stream = num
	read("a", 1) // 9-0
	read("b", 1) // 10-9
	read("a", 2) // 10-10, 11-0
	if got, want := ack("11-0"), []any{int64(1), int64(0), int64(1)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("11-0 above 9-0: %v, want %v", got, want)
	}
	if got, want := ack("9-0"), []any{int64(1), int64(1), int64(0)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("9-0: %v, want %v", got, want)
	}
	if got, want := ack("10-10"), []any{int64(1), int64(0), int64(1)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("10-10 above 10-9: %v, want %v", got, want)
	}
	left("10-9")
}
