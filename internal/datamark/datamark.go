// Package datamark notices that Redis lost its data. Beside each slot's data is a marker
// (lua/datamark/datamark.lua): a generation and, per observer, a count only it raises (seen once
// the replicas hold it). An empty Redis has no marker, an older copy a lower count; whoever
// notices (an api's Watch, the reconciler's Keeper) marks the loss until a full restore.
package datamark

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/internal/keyspace"
)

// Slot is one marker: the slot's name in messages and the marker's key.
type Slot struct{ Name, Key string }

// Slots lists every marker: one per shard, then the ranking slot's.
func Slots(keys keyspace.Space) []Slot {
	out := make([]Slot, 0, keyspace.Shards+1)
	for n := 0; n < keyspace.Shards; n++ {
		out = append(out, Slot{Name: "shard " + strconv.Itoa(n), Key: keys.Shard(n).Marker()})
	}
	return append(out, Slot{Name: "ranking", Key: keys.RankMarker()})
}

// ErrLost matches every *Loss (errors.Is).
var ErrLost = errors.New("redis_data_lost")

// Loss is Redis having lost the data of a slot: what was found and where.
type Loss struct {
	Slot   string // "shard 3", "ranking"
	Reason string // gone, behind or replaced (lua/datamark/datamark.lua)
}

// Error starts with the contract's reason token, so /readyz can answer it as it is.
func (l *Loss) Error() string {
	what := "its data marker says " + l.Reason
	switch l.Reason {
	case "gone":
		what = "Redis came back empty (its data marker is gone)"
	case "behind":
		what = "Redis came back from an older copy (its data marker moved back)"
	case "replaced":
		what = "Redis holds data the record does not know (its data marker was replaced)"
	}
	return "redis_data_lost: " + l.Slot + ": " + what + "; run `reconciler restore --all`"
}

// Is makes errors.Is(err, ErrLost) true for every Loss.
func (l *Loss) Is(target error) bool { return target == ErrLost }

// reply is a datamark.lua reply.
type reply struct {
	status string // ok, absent, lost, exists
	gen    string
	n      int64
	lost   string // the reason, for lost (and exists)
}

func call(ctx context.Context, rdb redis.Scripter, key string, args ...any) (reply, error) {
	v, err := script.Run(ctx, rdb, []string{key}, args...).Slice()
	if err != nil {
		return reply{}, fmt.Errorf("data marker %s: %w", key, err)
	}
	s := func(i int) string {
		if i < len(v) {
			if x, ok := v[i].(string); ok {
				return x
			}
		}
		return ""
	}
	r := reply{status: s(0)}
	switch r.status {
	case "ok":
		r.gen = s(1)
		if len(v) > 2 {
			r.n, _ = v[2].(int64)
		}
	case "lost":
		r.lost = s(1)
	case "exists":
		r.gen, r.lost = s(1), s(2)
	case "absent":
	default:
		return reply{}, fmt.Errorf("data marker %s: unexpected reply %v", key, v)
	}
	return r, nil
}

// newGen is a fresh marker generation: 16 random bytes, hex.
func newGen() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
