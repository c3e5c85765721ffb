package queue

import (
	"context"
	"testing"

	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestJoinScriptRefusesBeforeWriting: queue/join.lua's header promises that malformed
// arguments are an error reply that writes nothing. A score Lua's tonumber reads but ZADD does
// not (surrounding spaces) in a later join of a batch must not leave the earlier joins in the
// line uncounted (the start would not number them).
func TestJoinScriptRefusesBeforeWriting(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	k := keys.Item("j")
	if err := rdb.HSet(ctx, k.Hash(), "stock_total", 5, "stock_left", 5, "q_rate", 10,
		"starts_at", "99999999999999").Err(); err != nil {
		t.Fatal(err)
	}
	keyList := []string{k.Hash(), k.QueueLine(), k.QueueTickets(), k.QueueState(), k.Outbox()}
	for _, bad := range [][]any{{"j", "alice", "7", "bob", " 5"}, {"j", "alice", "7", "bob", "5 "},
		{"j", "alice", "7", "bob", "\t5"}, {"j k", "alice", "7"}, {"alice", "7"}} {
		err := joinScript.Run(ctx, rdb, keyList, bad...).Err()
		if err == nil {
			t.Errorf("args %q: no error", bad)
		}
		if n := rdb.ZCard(ctx, k.QueueLine()).Val(); n != 0 {
			t.Fatalf("args %q: the refused batch left %d shoppers in the line", bad, n)
		}
		if n := rdb.HLen(ctx, k.QueueTickets()).Val(); n != 0 {
			t.Fatalf("args %q: the refused batch left %d tickets", bad, n)
		}
		if n := rdb.XLen(ctx, k.Outbox()).Val(); n != 0 {
			t.Fatalf("args %q: the refused batch left %d outbox entries", bad, n)
		}
	}
}
