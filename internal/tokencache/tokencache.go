// Package tokencache remembers tokens that passed a signature check, with what it found, so
// repeated requests (bearer tokens, waiting tickets) skip the check; a hit compares the whole
// token, so a forged one never matches. A Cache is a fixed table of lock-free 8-way sets chosen
// by the token's last bytes (its signature); a full set evicts a round-robin victim.
package tokencache

import (
	"hash/maphash"
	"sync/atomic"
)

// Cache maps checked tokens to what their check found (V). The zero value is ready to use: its
// 2 MB table is allocated by the first Put.
type Cache[V any] struct {
	table atomic.Pointer[[sets]set[V]]
	clock atomic.Uint32 // victim choice when a set is full
}

// set keeps its ways' hashes (one cache line) apart from their entries (the next), so a lookup
// follows only the pointer whose hash matches; the table is allocated on its own to stay
// aligned. A hash may be older than its pointer: it only filters, the entry decides.
type set[V any] struct {
	hash  [ways]atomic.Uint64
	entry [ways]atomic.Pointer[Entry[V]]
}

// Entry is a checked token and what its check found. Value is shared by every request that
// presents the token: after Put only its atomic fields may change.
type Entry[V any] struct {
	hash  uint64
	Token string
	Value V
}

const (
	sets     = 1 << 14
	ways     = 8
	hashTail = 22 // a base64url HMAC-SHA256 truncated to 128 bits, the shortest signature we store
)

var seed = maphash.MakeSeed()

func hash(tok string) uint64 {
	if len(tok) > hashTail {
		tok = tok[len(tok)-hashTail:]
	}
	return maphash.String(seed, tok)
}

// Get returns tok's entry, or nil when tok was never stored or has been evicted.
func (c *Cache[V]) Get(tok string) *Entry[V] {
	t := c.table.Load()
	if t == nil {
		return nil
	}
	h := hash(tok)
	s := &t[h&(sets-1)]
	for i := range s.hash {
		if s.hash[i].Load() != h {
			continue
		}
		if e := s.entry[i].Load(); e != nil && e.hash == h && e.Token == tok {
			return e
		}
	}
	return nil
}

// Put stores a token whose check held and returns its entry, fill setting down what the check
// found before another goroutine can see it (V may hold atomic fields: filled in place). It takes
// the way already holding tok, else an empty way or one stale reports true for (nil: none), else
// a round-robin victim, so a token put again never fills a second way.
func (c *Cache[V]) Put(tok string, fill func(*V), stale func(*Entry[V]) bool) *Entry[V] {
	t := c.table.Load()
	if t == nil {
		c.table.CompareAndSwap(nil, new([sets]set[V]))
		t = c.table.Load()
	}
	h := hash(tok)
	e := &Entry[V]{hash: h, Token: tok}
	fill(&e.Value)
	s := &t[h&(sets-1)]
	way := -1
	for i := range s.entry {
		old := s.entry[i].Load()
		if old == nil || old.Token == tok {
			way = i // ways fill in order and are never emptied: tok is in no later way
			break
		}
		if way < 0 && stale != nil && stale(old) {
			way = i
		}
	}
	if way < 0 {
		way = int(c.clock.Add(1) % ways)
	}
	s.entry[way].Store(e)
	s.hash[way].Store(h)
	return e
}
