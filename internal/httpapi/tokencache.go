package httpapi

import (
	"sync"
	"sync/atomic"
	"time"
)

// tokenCache remembers shopper tokens that passed verification, until they expire, so a
// shopper's repeated requests (a sale is many clicks by the same people) skip the HMAC and
// JSON parsing of the JWT: that was a quarter of the CPU of a sold-out answer. Only
// verified tokens are stored, keyed by the whole token string, so a forged or altered
// token never matches an entry. Bounded: when full, it starts over.
type tokenCache struct {
	m sync.Map // token -> verifiedToken; reads take no lock
	n atomic.Int64
}

type verifiedToken struct {
	user string
	exp  time.Time
}

const tokenCacheSize = 1 << 16

func (c *tokenCache) get(tok string, now time.Time) (string, bool) {
	v, ok := c.m.Load(tok)
	if !ok {
		return "", false
	}
	vt := v.(verifiedToken)
	if !now.Before(vt.exp) {
		return "", false
	}
	return vt.user, true
}

func (c *tokenCache) put(tok, user string, exp time.Time) {
	if c.n.Add(1) > tokenCacheSize {
		c.m.Clear()
		c.n.Store(1)
	}
	c.m.Store(tok, verifiedToken{user: user, exp: exp})
}
