package exactlyonce_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/redisconn"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestWaitBehind: the commands always run; confirmed says whether the replicas required hold
// what they wrote: true without replicas required, true with the replica in step, false while
// it is stalled (its WAIT timed out), and false with too few live replicas (no WAIT is sent).
func TestWaitBehind(t *testing.T) {
	r := testenv.ReplicatedRedis(t, 1)
	ctx := context.Background()
	open := func(ack int) redis.UniversalClient {
		t.Helper()
		rdb, err := redisconn.OpenWith(ctx, redisconn.Options{Addrs: []string{r.Primary.Addr}, AckReplicas: ack, AckTimeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	plain, acked := open(0), open(1)
	testenv.WaitFor(t, "a live replica", 30*time.Second, func() bool { return redisconn.Ready(acked) == nil })
	key := "t" + testenv.Token(4) + ":n"
	incr := func(rdb redis.UniversalClient, want int64) bool {
		t.Helper()
		var cmd *redis.IntCmd
		confirmed, err := exactlyonce.WaitBehind(ctx, rdb, key, func(pipe redis.Pipeliner) { cmd = pipe.Incr(ctx, key) })
		if err != nil {
			t.Fatal(err)
		}
		if n, err := cmd.Result(); err != nil || n != want {
			t.Fatalf("INCR behind which WAIT went: %d, %v; want %d", n, err, want)
		}
		return confirmed
	}
	if !incr(plain, 1) {
		t.Fatal("not confirmed without replicas required")
	}
	if !incr(acked, 2) {
		t.Fatal("not confirmed with the replica in step")
	}
	r.Replicas[0].Pause()
	if incr(acked, 3) {
		r.Replicas[0].Resume()
		t.Fatal("confirmed while the replica was stopped")
	}
	r.Replicas[0].Resume()
	r.WaitInSync(t, r.Primary, 1)
	if !incr(acked, 4) {
		t.Fatal("not confirmed once the replica was in step again")
	}
	r.Replicas[0].Kill()
	testenv.WaitFor(t, "the watch to see no live replica", 30*time.Second, func() bool { return redisconn.Ready(acked) != nil })
	if incr(acked, 5) {
		t.Fatal("confirmed with no live replica")
	}
}
