package httpapi

import (
	"time"

	"github.com/flashsale/flashsale/internal/tokencache"
)

// tokenCache remembers shopper tokens that passed verification, until they expire, so a
// shopper's repeated requests (a sale is many clicks by the same people) skip the HMAC and
// JSON parsing of the JWT, the bulk of a cheap answer's CPU.
type tokenCache struct {
	c tokencache.Cache[verifiedToken]
}

type verifiedToken struct {
	user string
	exp  time.Time
}

func (c *tokenCache) get(tok string, now time.Time) (string, bool) {
	e := c.c.Get(tok)
	if e == nil || !now.Before(e.Value.exp) {
		return "", false
	}
	return e.Value.user, true
}

// put stores a verified token; an expired entry is the first to go when the set is full.
func (c *tokenCache) put(tok, user string, exp time.Time) {
	now := time.Now()
	c.c.Put(tok, func(v *verifiedToken) { *v = verifiedToken{user: user, exp: exp} },
		func(old *tokencache.Entry[verifiedToken]) bool { return !now.Before(old.Value.exp) })
}
