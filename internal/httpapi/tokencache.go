package httpapi

import (
	"hash/maphash"
	"sync/atomic"
	"time"
)

// tokenCache remembers shopper tokens that passed verification, until they expire, so a
// shopper's repeated requests (a sale is many clicks by the same people) skip the HMAC and
// JSON parsing of the JWT: that was a quarter of the CPU of a sold-out answer. Only
// verified tokens are stored, and a hit compares the whole token string, so a forged or
// altered token never matches an entry.
//
// It is a fixed, 4-way set-associative table of atomic pointers rather than a sync.Map: a
// lookup is one short hash and at most four pointer loads in one cache line, with no lock,
// no interface boxing and no trie walk (sync.Map.Load was 6-7% of a sold-out answer). The
// set is chosen by hashing only the token's last bytes, which for our JWTs are the HMAC
// signature and so already spread evenly; whatever a client sends there, it can only land in
// a set, never match an entry it does not hold the whole token of. A full set evicts a
// round-robin victim, which then simply verifies again.
type tokenCache struct {
	slots [tokenCacheSets * tokenCacheWays]atomic.Pointer[verifiedToken]
	clock atomic.Uint32 // victim choice when a set is full
}

type verifiedToken struct {
	hash uint64 // checked before the string: most misses in a set end here
	tok  string
	user string
	exp  time.Time
}

const (
	tokenCacheSets = 1 << 14
	tokenCacheWays = 4 // 65,536 tokens in all
	tokenHashTail  = 24
)

var tokenSeed = maphash.MakeSeed()

func tokenHash(tok string) uint64 {
	if len(tok) > tokenHashTail {
		tok = tok[len(tok)-tokenHashTail:]
	}
	return maphash.String(tokenSeed, tok)
}

func (c *tokenCache) set(h uint64) []atomic.Pointer[verifiedToken] {
	i := int(h&(tokenCacheSets-1)) * tokenCacheWays
	return c.slots[i : i+tokenCacheWays]
}

func (c *tokenCache) get(tok string, now time.Time) (string, bool) {
	h := tokenHash(tok)
	set := c.set(h)
	for i := range set {
		if e := set[i].Load(); e != nil && e.hash == h && e.tok == tok {
			if !now.Before(e.exp) {
				return "", false
			}
			return e.user, true
		}
	}
	return "", false
}

func (c *tokenCache) put(tok, user string, exp time.Time) {
	h := tokenHash(tok)
	set := c.set(h)
	e := &verifiedToken{hash: h, tok: tok, user: user, exp: exp}
	now := time.Now()
	for i := range set {
		if old := set[i].Load(); old == nil || old.tok == tok || !now.Before(old.exp) {
			set[i].Store(e)
			return
		}
	}
	set[int(c.clock.Add(1))%tokenCacheWays].Store(e)
}
