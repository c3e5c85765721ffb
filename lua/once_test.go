package lua

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// counter increments a key and replies with a nested table of integers and strings, or an
// error reply when told to, so the record's round trip and its exceptions can be checked.
var counter = Register("once_test_counter", `
if ARGV[1] == 'fail' then return redis.error_reply('ERR once_test: told to fail') end
local n = redis.call('INCR', KEYS[1])
return {n, 'n=' .. n, {n * 2, -n}}`)

func testRedis(t *testing.T) (redis.UniversalClient, string) {
	t.Helper()
	addr := os.Getenv("FLASHSALE_TEST_REDIS")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("redis at %s is not answering (%v); start it with: redis-server --daemonize yes", addr, err)
	}
	prefix := "tonce" + nextCallID() + ":"
	t.Cleanup(func() {
		ks, _ := rdb.Keys(context.Background(), prefix+"*").Result()
		if len(ks) > 0 {
			rdb.Del(context.Background(), ks...)
		}
		rdb.Close()
	})
	return rdb, prefix
}

// A re-sent call (same call id) answers the first run's reply, exactly, and writes nothing.
func TestOnceReplaysTheRecordedReply(t *testing.T) {
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	key := prefix + "{c}:n"
	keys, args := withCallRecord([]string{key}, []any{"go"})
	first, err := counter.rs.Run(ctx, rdb, keys, args...).Result()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		again, err := counter.rs.Run(ctx, rdb, keys, args...).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !equalReply(first, again) {
			t.Fatalf("re-sent call answered %#v, first run %#v", again, first)
		}
	}
	if n, _ := rdb.Get(ctx, key).Int(); n != 1 {
		t.Fatalf("counter %d after one call sent four times, want 1", n)
	}
	// A new call (Run mints a new id) runs again.
	if v, err := counter.Run(ctx, rdb, []string{key}, "go").Slice(); err != nil || v[0] != int64(2) {
		t.Fatalf("second call: %v %v", v, err)
	}
	if ttl := rdb.PTTL(ctx, keys[1]).Val(); ttl <= 0 || ttl > recordTTL {
		t.Fatalf("call record TTL %v, want (0, %v]", ttl, recordTTL)
	}
}

// An error reply is not recorded (it wrote nothing), and a call without the record's
// arguments is refused before anything is written.
func TestOnceErrorsAndMalformedCalls(t *testing.T) {
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	key := prefix + "{c}:n"
	keys, args := withCallRecord([]string{key}, []any{"fail"})
	if err := counter.rs.Run(ctx, rdb, keys, args...).Err(); err == nil {
		t.Fatal("want the script's error reply")
	}
	if n := rdb.Exists(ctx, keys[1]).Val(); n != 0 {
		t.Fatal("an error reply was recorded")
	}
	if err := counter.rs.Run(ctx, rdb, []string{key}, "go", "nan").Err(); err == nil {
		t.Fatal("a call with a bad record lifetime ran")
	}
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("a malformed call wrote")
	}
}

func TestCallKeySharesTheHashTag(t *testing.T) {
	for first, want := range map[string]string{
		"fs:{i:a}:item": "fs:{i:a}:call:x",
		"fs:{rl:pay:u}": "fs:{rl:pay:u}:call:x",
		"plain":         "plain:call:x",
		"fs:{}:odd":     "fs:{}:odd:call:x",
	} {
		if got := callKey(first, "x"); got != want {
			t.Errorf("callKey(%q) = %q, want %q", first, got, want)
		}
	}
}

func equalReply(a, b any) bool {
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok != bok {
		return false
	}
	if !aok {
		return a == b
	}
	if len(as) != len(bs) {
		return false
	}
	for i := range as {
		if !equalReply(as[i], bs[i]) {
			return false
		}
	}
	return true
}
