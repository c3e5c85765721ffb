package queue

import (
	"hash/maphash"
	"sync/atomic"
)

// ticketCache remembers ticket tokens this instance checked or signed, with their claims, so a
// shopper's next poll with the same token skips the base64 decode and the HMAC: a waiting
// shopper polls every few seconds, and re-polls the same token until the line moves. Only
// tokens whose signature held (or that this instance signed) are stored, and a hit compares
// the whole token string, so an altered token never matches an entry; the caller still checks
// the claims' item and user against the request.
//
// Like httpapi's tokenCache, a fixed 4-way set-associative table (no lock), the set chosen
// from the token's tail (its MAC, already uniform); a full set evicts a round-robin victim,
// which then simply verifies again. Each way keeps its entry's hash beside the pointer, so a
// set is one 64-byte line and a lookup over a long line of shoppers (whose entries are not in
// the CPU cache) follows only the pointer whose hash matches.
type ticketCache struct {
	slots [ticketCacheSets * ticketCacheWays]ticketSlot
	clock atomic.Uint32
}

// ticketSlot is one way of a set. hash and entry are stored apart, so a reader may see one
// from an older entry than the other: hash only filters, the entry's own hash and token decide.
type ticketSlot struct {
	hash  atomic.Uint64
	entry atomic.Pointer[checkedTicket]
}

type checkedTicket struct {
	hash   uint64
	tok    string
	claims ticketClaims
	// next is this token re-signed with a later "admitted so far" (the last one answered), so
	// polls that repeat an old token while the line stands still share one signature.
	next atomic.Pointer[resignedTicket]
}

type resignedTicket struct {
	seen int64
	tok  string
}

const (
	ticketCacheSets = 1 << 14
	ticketCacheWays = 4 // 65,536 tokens in all
	ticketHashTail  = 22
)

var ticketSeed = maphash.MakeSeed()

func ticketHash(tok string) uint64 {
	if len(tok) > ticketHashTail {
		tok = tok[len(tok)-ticketHashTail:]
	}
	return maphash.String(ticketSeed, tok)
}

func (c *ticketCache) set(h uint64) []ticketSlot {
	i := int(h&(ticketCacheSets-1)) * ticketCacheWays
	return c.slots[i : i+ticketCacheWays]
}

func (c *ticketCache) get(tok string) *checkedTicket {
	h := ticketHash(tok)
	set := c.set(h)
	for i := range set {
		if set[i].hash.Load() != h {
			continue
		}
		if e := set[i].entry.Load(); e != nil && e.hash == h && e.tok == tok {
			return e
		}
	}
	return nil
}

// put stores a token known good (verified or signed here) and returns its entry.
func (c *ticketCache) put(tok string, claims ticketClaims) *checkedTicket {
	h := ticketHash(tok)
	e := &checkedTicket{hash: h, tok: tok, claims: claims}
	set := c.set(h)
	way := &set[int(c.clock.Add(1))%ticketCacheWays]
	for i := range set {
		if set[i].entry.Load() == nil {
			way = &set[i]
			break
		}
	}
	way.entry.Store(e)
	way.hash.Store(h)
	return e
}
