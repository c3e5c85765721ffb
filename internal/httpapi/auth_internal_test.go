package httpapi

import (
	"testing"
	"time"
)

func TestTokenCacheMatchesWholeTokenOnly(t *testing.T) {
	var c tokenCache
	now := time.Now()
	tok := "header.payload-alice.SIGNATURE-SIGNATURE-SIGNATURE"
	c.put(tok, "alice", now.Add(time.Hour))
	if u, ok := c.get(tok, now); !ok || u != "alice" {
		t.Fatalf("get = %q, %v; want alice", u, ok)
	}
	// Same signature tail (same set, same hash), different head: an altered token.
	forged := "header.payload-mallory.SIGNATURE-SIGNATURE-SIGNATURE"
	if u, ok := c.get(forged, now); ok {
		t.Fatalf("altered token matched the cache as %q", u)
	}
	if _, ok := c.get(tok[:len(tok)-1], now); ok {
		t.Fatal("a truncated token matched the cache")
	}
	if _, ok := c.get(tok, now.Add(time.Hour)); ok {
		t.Fatal("an expired token matched the cache")
	}
}
