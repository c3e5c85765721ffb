package lock

import (
	"context"
	"testing"

	"github.com/flashsale/flashsale/internal/testenv"
)

// TestObtainScriptRefusesBadTTL: a ttl that SET PX cannot take is refused before the fencing
// counter moves, so a refused caller never consumes a fencing number.
func TestObtainScriptRefusesBadTTL(t *testing.T) {
	rdb, keys := testenv.Redis(t)
	ctx := context.Background()
	key, fence := keys.Lock("job")
	for _, ttl := range []string{"0", "-5", "1.5", "x", "nan", "inf", "1e20"} {
		if err := obtainScript.Run(ctx, rdb, []string{key, fence}, "owner", ttl).Err(); err == nil {
			t.Errorf("ttl %q: script accepted it", ttl)
		}
	}
	if n := rdb.Exists(ctx, key, fence).Val(); n != 0 {
		t.Fatalf("refused calls wrote %d keys (fence now %q)", n, rdb.Get(ctx, fence).Val())
	}
}
