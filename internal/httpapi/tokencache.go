package httpapi

import (
	"sync"
	"time"
)

// tokenCache remembers shopper tokens that passed verification, until they expire, so a
// shopper's repeated requests (a sale is many clicks by the same people) skip the HMAC and
// JSON parsing of the JWT: that was a quarter of the CPU of a sold-out answer. Only
// verified tokens are stored, keyed by the whole token string, so a forged or altered
// token never matches an entry. Bounded: when full, it starts over.
type tokenCache struct {
	mu sync.RWMutex
	m  map[string]verifiedToken
}

type verifiedToken struct {
	user string
	exp  time.Time
}

const tokenCacheSize = 1 << 16

func (c *tokenCache) get(tok string, now time.Time) (string, bool) {
	c.mu.RLock()
	v, ok := c.m[tok]
	c.mu.RUnlock()
	if !ok || !now.Before(v.exp) {
		return "", false
	}
	return v.user, true
}

func (c *tokenCache) put(tok, user string, exp time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= tokenCacheSize {
		c.m = make(map[string]verifiedToken, 1024)
	}
	c.m[tok] = verifiedToken{user: user, exp: exp}
}
