package queue

import (
	"sync/atomic"

	"github.com/flashsale/flashsale/internal/tokencache"
)

// ticketCache remembers ticket tokens this instance checked or signed, with their claims, so a
// shopper's next poll with the same token skips the base64 decode and the HMAC: a waiting
// shopper polls every few seconds, and re-polls the same token until the line moves. The
// caller still checks the claims' item and user against the request.
type ticketCache struct {
	c tokencache.Cache[checkedTicket]
}

type checkedTicket struct {
	claims ticketClaims
	// next is this token re-signed with a later "admitted so far" (the last one answered), so
	// polls that repeat an old token while the line stands still share one signature.
	next atomic.Pointer[resignedTicket]
}

type resignedTicket struct {
	seen int64
	tok  string
}

func (c *ticketCache) get(tok string) *checkedTicket {
	if e := c.c.Get(tok); e != nil {
		return &e.Value
	}
	return nil
}

// put stores a token known good (verified or signed here) and returns its entry.
func (c *ticketCache) put(tok string, claims ticketClaims) *checkedTicket {
	return &c.c.Put(tok, func(v *checkedTicket) { v.claims = claims }, nil).Value
}
