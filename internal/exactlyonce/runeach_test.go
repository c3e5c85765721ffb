package exactlyonce_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// tally increments its key and replies the count and its argument, or an error reply when told
// to fail; told to be slow, it first waits (busy) for ARGV[2] ms.
var tally = exactlyonce.Register("runeach_test_tally", `
if ARGV[1] == 'fail' then return redis.error_reply('ERR runeach_test: told to fail') end
if ARGV[1] == 'slow' then
  local function ms() local t = redis.call('TIME') return t[1] * 1000 + t[2] / 1000 end
  local from = ms()
  repeat until ms() - from >= tonumber(ARGV[2])
end
return {redis.call('INCR', KEYS[1]), ARGV[1]}`)

// tallyCalls returns n calls of tally, each on a key of its own hash tag, the one at fail told to
// fail (-1: none).
func tallyCalls(keys keyspace.Space, n, fail int) []exactlyonce.Call {
	calls := make([]exactlyonce.Call, n)
	for i := range calls {
		arg := fmt.Sprint(i)
		if i == fail {
			arg = "fail"
		}
		calls[i] = exactlyonce.Call{Keys: []string{fmt.Sprintf("%s{c:%d}:n", keys.Prefix, i)}, Args: []any{arg}}
	}
	return calls
}

// checkTally checks that every call but the one at fail ran exactly once and answered its own
// reply, in order.
func checkTally(t *testing.T, rdb redis.UniversalClient, calls []exactlyonce.Call, replies []*redis.Cmd, fail int) {
	t.Helper()
	if len(replies) != len(calls) {
		t.Fatalf("%d replies to %d calls", len(replies), len(calls))
	}
	for i, cmd := range replies {
		n, err := rdb.Get(context.Background(), calls[i].Keys[0]).Int()
		if i == fail {
			if cmd.Err() == nil || !strings.Contains(cmd.Err().Error(), "told to fail") || n != 0 {
				t.Fatalf("call %d, told to fail: %v, counter %d", i, cmd.Err(), n)
			}
			continue
		}
		v, err2 := cmd.Slice()
		if err2 != nil || len(v) != 2 || v[0] != int64(1) || v[1] != calls[i].Args[0] || err != nil || n != 1 {
			t.Fatalf("call %d: reply %v %v, counter %d %v; want {1 %v} and 1", i, v, err2, n, err, calls[i].Args[0])
		}
	}
}

// RunEach answers each call its own reply, in order, each call run once; one call's error
// reply is its own; a call without keys is refused alone.
func TestRunEach(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	calls := tallyCalls(keys, 300, 57)
	replies := tally.RunEach(context.Background(), rdb, calls)
	checkTally(t, rdb, calls, replies, 57)

	replies = tally.RunEach(context.Background(), rdb, []exactlyonce.Call{{Args: []any{"x"}}, tallyCalls(keys, 1, -1)[0]})
	if replies[0].Err() == nil || replies[1].Err() != nil {
		t.Fatalf("a call without keys: %v, the next call: %v", replies[0].Err(), replies[1].Err())
	}
}

// After SCRIPT FLUSH (a restart, a failover) the calls are sent again with the script's body.
func TestRunEachAfterScriptFlush(t *testing.T) {
	rdb, keys, _ := testenv.PrivateRedis(t)
	if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	calls := tallyCalls(keys, 50, -1)
	checkTally(t, rdb, calls, tally.RunEach(context.Background(), rdb, calls), -1)
}

// The replies come later than exactlyonce.AttemptTimeout (the pipeline's last call takes 2.5 s, on a
// server of the test's own): RunEach re-sends, and every call, though it ran at the first
// send, runs once and answers its own reply (the calls before the slow one from their records).
func TestRunEachRepliesLate(t *testing.T) {
	rdb, keys, _ := testenv.PrivateRedis(t)
	calls := tallyCalls(keys, 20, -1)
	slow := exactlyonce.AttemptTimeout + 500*time.Millisecond
	calls = append(calls, exactlyonce.Call{Keys: []string{keys.Prefix + "{c:slow}:n"}, Args: []any{"slow", slow.Milliseconds()}})
	before := exactlyonce.Resends()
	checkTally(t, rdb, calls, tally.RunEach(context.Background(), rdb, calls), -1)
	if exactlyonce.Resends() == before {
		t.Fatal("nothing was re-sent: the replies came in time")
	}
}

// A pipeline that never reached Redis answers at once that nothing was changed, not that the
// outcome is unknown.
func TestRunEachNothingSent(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	for i, cmd := range tally.RunEach(context.Background(), rdb, tallyCalls(keyspace.Space{Prefix: "x:"}, 3, -1)) {
		if err := cmd.Err(); err == nil || errors.Is(err, exactlyonce.ErrOutcomeUnknown) {
			t.Fatalf("call %d to a closed port: %v", i, err)
		}
	}
}
