package httpapi

import (
	"strconv"
	"sync"
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

// Many goroutines putting and getting overlapping tokens: every hit is the token's own user
// (run under -race).
func TestTokenCacheConcurrent(t *testing.T) {
	var c tokenCache
	exp := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20000 {
				n := (i*7 + g) % 5000
				tok := "jwt." + strconv.Itoa(n) + ".sig" + strconv.Itoa(n*2654435761%1000003)
				if u, ok := c.get(tok, time.Now()); ok {
					if u != "u"+strconv.Itoa(n) {
						t.Errorf("token %d answered as %q", n, u)
						return
					}
					continue
				}
				c.put(tok, "u"+strconv.Itoa(n), exp)
			}
		}()
	}
	wg.Wait()
}
