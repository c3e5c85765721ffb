package exactlyonce

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

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
	// The record outlives the call's deadline (a second past it), and no more.
	if ttl, life := rdb.PTTL(ctx, keys[1]).Val(), CallDeadline+ClockSkew+time.Second; ttl <= CallDeadline || ttl > life {
		t.Fatalf("call record TTL %v, want (%v, %v]", ttl, CallDeadline, life)
	}
}

// A send that arrives after its call's deadline (by the server's clock) and finds no record is
// refused and writes nothing, however it got there; one that finds the record still answers
// from it. Run reports the refusal as an unknown outcome: an earlier send may have run.
func TestOnceRefusesALateCall(t *testing.T) {
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	key := prefix + "{c}:n"
	past := time.Now().Add(-time.Second).UnixMilli()
	late := []string{key, callKey(key, nextCallID())}
	err := counter.rs.Run(ctx, rdb, late, "go", past).Err()
	if !redis.HasErrorPrefix(err, errLate) {
		t.Fatalf("a call past its deadline answered %v, want a LATE refusal", err)
	}
	if n := rdb.Exists(ctx, key, late[1]).Val(); n != 0 {
		t.Fatal("a call past its deadline wrote")
	}
	// A deadline far ahead of the server's clock would keep a record that long: refused.
	far := time.Now().Add(time.Hour).UnixMilli()
	if err := counter.rs.Run(ctx, rdb, late, "go", far).Err(); err == nil || redis.HasErrorPrefix(err, errLate) {
		t.Fatalf("a deadline an hour ahead answered %v, want an error", err)
	}
	// A call that ran answers from its record even when re-sent after its deadline.
	keys, args := withCallRecord([]string{key}, []any{"go"})
	first, err := counter.rs.Run(ctx, rdb, keys, args...).Result()
	if err != nil {
		t.Fatal(err)
	}
	args[len(args)-1] = past // the same call, as if its deadline had passed
	if again, err := counter.rs.Run(ctx, rdb, keys, args...).Result(); err != nil || !equalReply(first, again) {
		t.Fatalf("a late re-send with a record answered %v %v, want %v", again, err, first)
	}
	// Run turns a refusal into ErrOutcomeUnknown.
	lateScript := Register("once_test_late", `return redis.error_reply('LATE once_test: as once.lua would')`)
	if err := lateScript.Run(ctx, rdb, []string{key}).Err(); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("Run of a refused call: %v, want ErrOutcomeUnknown", err)
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
