package reconcile

import (
	"context"
	"testing"

	"github.com/flashsale/flashsale/internal/testenv"
)

// TestRestoreScriptsRefuseBadNumbers: restore_begin and restore_put refuse what tonumber reads
// but a fence or a restored figure cannot be ('inf', fractions, zero units) and write nothing.
// A fence of inf would have cleared the item and then refused every later restorer.
func TestRestoreScriptsRefuseBadNumbers(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	k := keys.Item("r")
	rdb.Set(ctx, k.RestoreFence(), 3, 0)
	rdb.HSet(ctx, k.Hash(), "stock_total", 5)
	rdb.HSet(ctx, k.Orders(), "r.1", "u|1|1|paid|1|2")

	beginKeys := []string{k.RestoreFence(), k.Hash(), k.Orders(), k.Held(), k.PaidBy(), k.Expiry(), k.Outbox()}
	for _, n := range []string{"inf", "nan", "1.5", "0", "x"} {
		if err := restoreBegin.Run(ctx, rdb, beginKeys, n, "*").Err(); err == nil {
			t.Errorf("restore_begin, fence %q: script accepted it", n)
		}
	}
	if got := rdb.Get(ctx, k.RestoreFence()).Val(); got != "3" {
		t.Fatalf("restore_begin moved the fence to %q", got)
	}
	if rdb.Exists(ctx, k.Hash(), k.Orders()).Val() != 2 {
		t.Fatalf("a refused restore_begin cleared the item")
	}

	putKeys := []string{k.RestoreFence(), k.Orders(), k.Held(), k.PaidBy(), k.Expiry()}
	for _, e := range [][]any{
		{"held", "u", 0}, {"held", "u", "inf"}, {"paid", "u", 0}, {"paid", "u", "1.5"},
		{"exp", "r.1", "inf"}, {"exp", "r.1", -1},
	} {
		if err := restorePut.Run(ctx, rdb, putKeys, append([]any{3}, e...)...).Err(); err == nil {
			t.Errorf("restore_put %v: script accepted it", e)
		}
	}
	if n := rdb.Exists(ctx, k.Held(), k.PaidBy(), k.Expiry()).Val(); n != 0 {
		t.Fatalf("refused restore_put calls wrote %d keys", n)
	}
}
