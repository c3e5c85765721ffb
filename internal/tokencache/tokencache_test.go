package tokencache

import (
	"crypto/rand"
	"encoding/base64"
	"strconv"
	"sync"
	"testing"
	"unsafe"
)

func put(c *Cache[string], tok, user string) {
	c.Put(tok, func(v *string) { *v = user }, nil)
}

func TestMatchesWholeTokenOnly(t *testing.T) {
	var c Cache[string]
	tok := "header.payload-alice.SIGNATURE-SIGNATURE-SIGNATURE"
	put(&c, tok, "alice")
	if e := c.Get(tok); e == nil || e.Value != "alice" {
		t.Fatalf("Get = %+v; want alice", e)
	}
	// Same signature tail (same set, same hash), different head: an altered token.
	if e := c.Get("header.payload-mallory.SIGNATURE-SIGNATURE-SIGNATURE"); e != nil {
		t.Fatalf("altered token matched the cache as %q", e.Value)
	}
	if e := c.Get(tok[:len(tok)-1]); e != nil {
		t.Fatal("a truncated token matched the cache")
	}
}

// A full set evicts, and evicted tokens miss (they check again); no token ever gets another's
// value. A stale entry goes before a live one.
func TestEvictsInsteadOfConfusing(t *testing.T) {
	var c Cache[string]
	// One shared tail puts every token in the same set.
	tok := func(i int) string { return "t" + strconv.Itoa(i) + ".same-tail-same-tail-same-tail" }
	for i := range 3 * ways {
		put(&c, tok(i), "u"+strconv.Itoa(i))
	}
	hits := 0
	for i := range 3 * ways {
		e := c.Get(tok(i))
		if e != nil && e.Value != "u"+strconv.Itoa(i) {
			t.Fatalf("token %d answered as %q", i, e.Value)
		}
		if e != nil {
			hits++
		}
	}
	if hits != ways {
		t.Fatalf("%d tokens of one set cached, want the set's %d ways", hits, ways)
	}
	var kept []string
	for i := range 3 * ways {
		if c.Get(tok(i)) != nil {
			kept = append(kept, tok(i))
		}
	}
	c.Put("new.same-tail-same-tail-same-tail", func(v *string) { *v = "new" },
		func(e *Entry[string]) bool { return e.Token == kept[3] })
	if c.Get(kept[3]) != nil || c.Get("new.same-tail-same-tail-same-tail") == nil {
		t.Fatal("the stale entry was not the one replaced")
	}
	for i, k := range kept {
		if i != 3 && c.Get(k) == nil {
			t.Fatalf("live entry %s evicted while a stale one was there", k)
		}
	}
}

// A token put again (two requests of a new token checked at once; a ticket re-signed to the
// same bytes on every poll read from Redis) takes its own way back instead of a second one:
// Get answers the latest entry, and the set still holds as many tokens as it has ways.
func TestPutAgainKeepsOneWay(t *testing.T) {
	var c Cache[string]
	tok := func(i int) string { return "t" + strconv.Itoa(i) + ".same-tail-same-tail-same-tail" }
	put(&c, tok(0), "first")
	put(&c, tok(1), "u1")
	put(&c, tok(0), "again")
	if e := c.Get(tok(0)); e == nil || e.Value != "again" {
		t.Fatalf("Get after a second Put = %+v; want the second entry", e)
	}
	for i := 2; i < ways; i++ {
		put(&c, tok(i), "u"+strconv.Itoa(i))
	}
	for i := range ways {
		if c.Get(tok(i)) == nil {
			t.Fatalf("token %d of %d evicted from a set of %d ways", i, ways, ways)
		}
	}
}

// A waiting line of 20,000 shoppers' tokens (random signatures) all stay cached, so shoppers
// polling in turn do not evict one another into the full check.
func TestHoldsTwentyThousandShoppers(t *testing.T) {
	var c Cache[string]
	const n = 20000
	toks := make([]string, n)
	for i := range toks {
		var sig [16]byte
		_, _ = rand.Read(sig[:])
		toks[i] = "k.w" + strconv.Itoa(i) + "." + base64.RawURLEncoding.EncodeToString(sig[:])
		put(&c, toks[i], toks[i])
	}
	misses := 0
	for _, tok := range toks {
		if e := c.Get(tok); e == nil || e.Value != tok {
			misses++
		}
	}
	if misses > n/1000 {
		t.Fatalf("%d of %d tokens evicted", misses, n)
	}
}

// Many goroutines putting and getting overlapping tokens: every hit is the token's own value
// (run under -race).
func TestConcurrent(t *testing.T) {
	var c Cache[string]
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20000 {
				n := (i*7 + g) % 5000
				tok := "jwt." + strconv.Itoa(n) + ".sig" + strconv.Itoa(n*2654435761%1000003)
				if e := c.Get(tok); e != nil {
					if e.Value != "u"+strconv.Itoa(n) {
						t.Errorf("token %d answered as %q", n, e.Value)
						return
					}
					continue
				}
				put(&c, tok, "u"+strconv.Itoa(n))
			}
		}()
	}
	wg.Wait()
}

// TestSetsAreLineAligned: a set's hashes fill one 64-byte cache line and its entries the
// next (a lookup is one fetch of a line pair), and the zero Cache answers before any Put.
func TestSetsAreLineAligned(t *testing.T) {
	var c Cache[string]
	if c.Get("never") != nil {
		t.Fatal("an empty cache found a token")
	}
	put(&c, "tok", "u")
	if unsafe.Sizeof(set[string]{}) != 128 {
		t.Fatalf("a set is %d bytes, want 128", unsafe.Sizeof(set[string]{}))
	}
	if a := uintptr(unsafe.Pointer(c.table.Load())); a%128 != 0 {
		t.Fatalf("the table starts at %#x, not on a 128-byte boundary", a)
	}
}
