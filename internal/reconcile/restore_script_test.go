package reconcile

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestRestoreScriptsRefuseBadNumbers: restore_begin and restore_put refuse what tonumber reads
// but a fence or a figure cannot be ('inf', fractions, zero units, past 2^53, non-digits) and
// write nothing: a fence of inf would lock out every later restorer, and a held of '1e3' would
// make later cancels and expiries fail half-way (HINCRBY).
func TestRestoreScriptsRefuseBadNumbers(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	k := keys.Item("r")
	rdb.Set(ctx, k.RestoreFence(), 3, 0)
	rdb.HSet(ctx, k.Hash(), "stock_total", 5)
	rdb.HSet(ctx, k.Orders(), "r.1", "u|1|1|paid|1|2")

	beginKeys := []string{k.RestoreFence(), k.Hash(), k.Orders(), k.Held(), k.PaidBy(), k.Outbox(), k.Changed(), k.Clock(), k.Restoring(), k.UserOrders()}
	for _, n := range []string{"inf", "nan", "1.5", "0", "x", "1e300", "9007199254740992"} {
		if err := restoreBegin.Run(ctx, rdb, beginKeys, n, "*", "", "r").Err(); err == nil {
			t.Errorf("restore_begin, fence %q: script accepted it", n)
		}
	}
	if got := rdb.Get(ctx, k.RestoreFence()).Val(); got != "3" {
		t.Fatalf("restore_begin moved the fence to %q", got)
	}
	if rdb.Exists(ctx, k.Hash(), k.Orders()).Val() != 2 {
		t.Fatalf("a refused restore_begin cleared the item")
	}

	putKeys := []string{k.RestoreFence(), k.Orders(), k.Held(), k.PaidBy(), k.Expiry(), k.UserOrders(), k.Payments()}
	for _, e := range [][]any{
		{"held", "u", 0}, {"held", "u", "inf"}, {"paid", "u", 0}, {"paid", "u", "1.5"},
		{"exp", "r.1", "inf"}, {"exp", "r.1", -1},
		{"held", "u", "1e3"}, {"paid", "u", "0x10"}, {"held", "u", " 5"}, {"exp", "r.1", "1e3"},
		{"held", "u", "99999999999999999999"},
		// An order list readers could not split into sequence numbers.
		{"useqs", "u", ""}, {"useqs", "u", "1,"}, {"useqs", "u", ",1"}, {"useqs", "u", "1,,2"}, {"useqs", "u", "1,x"},
		// A payment record the orders scripts could not parse.
		{"pay", "r.1", ""}, {"pay", "r.1", "cs_1|paid"}, {"pay", "r.1", "cs|1|paid||a"}, {"pay", "", "cs_1|paid||a"},
	} {
		if err := restorePut.Run(ctx, rdb, putKeys, append([]any{3}, e...)...).Err(); err == nil {
			t.Errorf("restore_put %v: script accepted it", e)
		}
	}
	if n := rdb.Exists(ctx, k.Held(), k.PaidBy(), k.Expiry(), k.UserOrders(), k.Payments()).Val(); n != 0 {
		t.Fatalf("refused restore_put calls wrote %d keys", n)
	}
}

// TestReemitRefusesBadFences: reconcile/reemit.lua stores the batch's fence on the item, so a
// fence tonumber reads but no lock hands out ('inf', '1e300', one past 2^53) is refused before
// anything is written: stored, it would fence out every later batch and restore of the item.
func TestReemitRefusesBadFences(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	k := keys.Item("r")
	rdb.Set(ctx, k.RestoreFence(), 3, 0)
	rdb.HSet(ctx, k.Hash(), "name", "R", "stock_total", 5)
	reemitKeys := []string{k.Hash(), k.Orders(), k.Outbox(), k.RestoreFence()}
	for _, n := range []string{"inf", "nan", "1.5", "0", "x", "1e300", "9007199254740992"} {
		if err := reemitScript.Run(ctx, rdb, reemitKeys, "r", "item", "", "", n).Err(); err == nil {
			t.Errorf("reconcile_reemit, fence %q: script accepted it", n)
		}
	}
	if got := rdb.Get(ctx, k.RestoreFence()).Val(); got != "3" {
		t.Fatalf("refused reconcile_reemit calls moved the fence to %q", got)
	}
	if n := rdb.XLen(ctx, k.Outbox()).Val(); n != 0 {
		t.Fatalf("refused reconcile_reemit calls appended %d events", n)
	}
	// A later batch is not fenced out.
	reply, err := reemitScript.Run(ctx, rdb, reemitKeys, "r", "item", "", "", 4).Slice()
	if err != nil || reply[0] != "reemitted" {
		t.Fatalf("fence 4 after the refused calls: %v %v", reply, err)
	}
}

// TestRestoreBeginReplies: every reply of restore_begin. The item is cleared only when the
// caller holds the newest fence and the item is as its idle check saw it (same version, no
// entry of its shard's outbox up to the position the check saw published) or the restore is
// forced; otherwise nothing is written, not even the fence.
func TestRestoreBeginReplies(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		version  string // the item hash's version now ("" for no hash)
		outbox   int    // events up to the checked position still waiting in the outbox
		fence    int64  // the item's stored restore fence
		expected string // what the idle check saw
		want     []any
	}{
		{"idle as checked", "7", 0, 2, "7", []any{"ok", int64(7), int64(3)}},
		{"no item hash, none at the check", "", 0, 0, "", []any{"ok", int64(0), int64(0)}},
		{"sold after the check", "8", 0, 2, "7", []any{"moved", "8", int64(0)}},
		{"an event not yet published", "7", 1, 2, "7", []any{"moved", "7", int64(1)}},
		{"created after the check", "1", 0, 0, "", []any{"moved", "1", int64(0)}},
		{"forced: whatever Redis holds", "9", 2, 2, "*", []any{"ok", int64(9), int64(3)}},
		{"a newer restorer began", "7", 0, 6, "7", []any{"fenced", int64(6)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := keys.Item("b" + testenv.Token(4))
			if c.version != "" {
				rdb.HSet(ctx, k.Hash(), "version", c.version, "seq", 3)
				rdb.HSet(ctx, k.Orders(), "x.1", "u|1|1|reserved|1|2")
				rdb.HSet(ctx, k.Held(), "u", 1)
				rdb.ZAdd(ctx, k.Expiry(), redis.Z{Score: 2, Member: "x.1"})
			}
			pos := "0-0"
			for i := 0; i < c.outbox; i++ {
				pos = rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Outbox(), Values: []any{"type", "order.reserved"}}).Val()
			}
			// An entry after the checked position (another item's event) never makes it moved.
			rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Outbox(), Values: []any{"type", "order.reserved"}})
			if c.fence > 0 {
				rdb.Set(ctx, k.RestoreFence(), c.fence, 0)
			}
			before := rdb.Exists(ctx, k.Hash(), k.Orders(), k.Held()).Val()
			got, err := restoreBegin.Run(ctx, rdb, []string{k.RestoreFence(), k.Hash(), k.Orders(),
				k.Held(), k.PaidBy(), k.Outbox(), k.Changed(), k.Clock(), k.Restoring(), k.UserOrders()}, 5, c.expected, pos, k.ID).Slice()
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("reply %v, want %v", got, c.want)
			}
			left := rdb.Exists(ctx, k.Hash(), k.Orders(), k.Held()).Val()
			fence, _ := rdb.Get(ctx, k.RestoreFence()).Int64()
			if c.want[0] == "ok" {
				if left != 0 || fence != 5 {
					t.Fatalf("ok, but %d keys survive and the fence is %d", left, fence)
				}
				return
			}
			if left != before || fence != c.fence {
				t.Fatalf("refused, but %d of %d keys survive and the fence moved to %d", left, before, fence)
			}
		})
	}

	// Without the version the check saw, nothing is cleared.
	k := keys.Item("b")
	rdb.HSet(ctx, k.Hash(), "version", 1)
	if err := restoreBegin.Run(ctx, rdb, []string{k.RestoreFence(), k.Hash(), k.Orders(), k.Held(),
		k.PaidBy(), k.Outbox(), k.Changed(), k.Clock(), k.Restoring(), k.UserOrders()}, 5).Err(); err == nil {
		t.Fatal("restore_begin without the expected version: accepted")
	}
	if rdb.Exists(ctx, k.Hash()).Val() != 1 || rdb.Exists(ctx, k.RestoreFence()).Val() != 0 {
		t.Fatal("a refused restore_begin wrote")
	}
}
