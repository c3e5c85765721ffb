package inventory

import (
	"sync"
	"sync/atomic"
	"time"
)

// UnknownFor is how long an id Redis reported missing is answered unknown from memory: short,
// so an item created a moment later sells at once, and long enough that a flood repeating
// made-up ids costs Redis one look-up per id and window.
const UnknownFor = time.Second

// unknownKept bounds the ids remembered missing at once; past it, the expired ones go, and
// if none has expired, all do (each costs one look-up again).
const unknownKept = 100_000

// unknownIDs is the short negative cache of Known.
type unknownIDs struct {
	mu   sync.Mutex
	m    map[string]time.Time // id -> answered unknown from memory until then
	hits atomic.Int64
}

func (u *unknownIDs) missing(id string, now time.Time) bool {
	u.mu.Lock()
	until, ok := u.m[id]
	u.mu.Unlock()
	if ok && now.Before(until) {
		u.hits.Add(1)
		return true
	}
	return false
}

func (u *unknownIDs) remember(id string, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[string]time.Time{}
	}
	if len(u.m) >= unknownKept {
		for k, until := range u.m {
			if !now.Before(until) {
				delete(u.m, k)
			}
		}
		if len(u.m) >= unknownKept {
			clear(u.m)
		}
	}
	u.m[id] = now.Add(UnknownFor)
}

// UnknownFromMemory is the look-ups of ids the snapshot lacks answered from the negative
// cache, no Redis call.
func (s *Store) UnknownFromMemory() int64 { return s.unknown.hits.Load() }
