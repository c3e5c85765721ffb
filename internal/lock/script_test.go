package lock

import (
	"context"
	"testing"

	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestObtainScriptRefusesBadArguments: a ttl that SET PX cannot take, or a floor that is not a
// whole number the counter can hold exactly, is refused before the fencing counter moves, so a
// refused caller never consumes (or poisons) a fencing number. A floor of inf would have set
// the counter to a value INCR refuses for good.
func TestObtainScriptRefusesBadArguments(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	key, fence := keys.Lock("job")
	for _, ttl := range []string{"0", "-5", "1.5", "x", "nan", "inf", "1e20"} {
		if err := obtainScript.Run(ctx, rdb, []string{key, fence}, "owner", ttl).Err(); err == nil {
			t.Errorf("ttl %q: script accepted it", ttl)
		}
	}
	for _, floor := range []string{"-1", "1.5", "x", "nan", "inf", "-inf", "1e16", ""} {
		if err := obtainScript.Run(ctx, rdb, []string{key, fence}, "owner", 1000, floor).Err(); err == nil {
			t.Errorf("floor %q: script accepted it", floor)
		}
	}
	if n := rdb.Exists(ctx, key, fence).Val(); n != 0 {
		t.Fatalf("refused calls wrote %d keys (fence now %q)", n, rdb.Get(ctx, fence).Val())
	}
	// Without a floor (callers from before it existed) the script still works.
	if err := obtainScript.Run(ctx, rdb, []string{key, fence}, "owner", 1000).Err(); err != nil {
		t.Fatalf("no floor: %v", err)
	}
}
