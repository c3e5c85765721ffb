package queue

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTokensSignAndCheck: a ticket's token and a pass verify only unaltered, only for their own
// item and user, and under key rotation (new key first) old tokens still verify while the old
// signer does not accept the new key's tokens.
func TestTokensSignAndCheck(t *testing.T) {
	oldKey, newKey := []byte("the old waiting-room secret, 32+ bytes"), []byte("the new waiting-room secret, 32+ bytes")
	old, _ := NewSigner(oldKey)
	rotated, _ := NewSigner(newKey, oldKey)
	c := ticketClaims{item: "i1", user: "u1", state: 'w', line: 42, seen: 7}
	tok := old.signTicket(c)
	for name, s := range map[string]*Signer{"same key": old, "rotated": rotated} {
		if got, ok := s.verifyTicket(tok, "i1", "u1"); !ok || got != c {
			t.Errorf("%s: %+v %v", name, got, ok)
		}
	}
	if _, ok := old.verifyTicket(rotated.signTicket(c), "i1", "u1"); ok {
		t.Error("a token of a key the signer does not hold verified")
	}
	for i := range tok {
		bad := []byte(tok)
		bad[i] ^= 0x01
		if _, ok := rotated.verifyTicket(string(bad), "i1", "u1"); ok {
			t.Fatalf("token altered at byte %d verified", i)
		}
	}
	for _, iu := range [][2]string{{"i2", "u1"}, {"i1", "u2"}, {"i1", "u1x"}} {
		if _, ok := old.verifyTicket(tok, iu[0], iu[1]); ok {
			t.Errorf("the token verified for item %s user %s", iu[0], iu[1])
		}
	}
	// Item and user are signed, not carried: a poll names them already.
	long := ticketClaims{item: strings.Repeat("i", 64), user: strings.Repeat("u", 64), state: 'w', line: 42, seen: 7}
	if lt := old.signTicket(long); len(lt) != len(tok) {
		t.Errorf("a ticket's token grows with its ids: %d bytes for 64-byte ids, %d for 2-byte ones", len(lt), len(tok))
	} else if _, ok := old.verifyTicket(lt, long.item, long.user); !ok {
		t.Error("the ticket of the longest ids did not verify")
	}
	p := passClaims{item: "i1", user: "u1", id: "9", expiresMS: 1700000000000}
	if got, ok := rotated.verifyPass(old.signPass(p)); !ok || got != p {
		t.Errorf("pass: %+v %v", got, ok)
	}
	if _, ok := old.verifyPass(tok); ok {
		t.Error("a ticket's token passed as a pass")
	}
	if _, ok := old.verifyTicket(old.signPass(p), "i1", "u1"); ok {
		t.Error("a pass passed as a ticket's token")
	}
}

// TestCheckedTokens: a poll answered from the cache of checked tokens answers as a verified
// one would: an altered token or another shopper's is never answered from memory, and polls
// repeating an old token after the line moved all get one re-signed token that verifies with
// the new count.
func TestCheckedTokens(t *testing.T) {
	signer, _ := NewSigner([]byte("a waiting-room test secret of 32+ bytes"))
	s := &Store{signer: signer}
	now := time.Now()
	s.observe("i", lineView{status: lineLive, admitted: 3, at: now})
	tok := s.signer.signTicket(ticketClaims{item: "i", user: "u", state: 'w', line: 10, seen: 3})
	for range 2 { // the first poll checks and stores the token, the second finds it
		tk, ok := s.fromMemory("i", "u", tok, now)
		if !ok || tk.Position != 7 || tk.Token != tok {
			t.Fatalf("poll: %+v %v", tk, ok)
		}
	}
	bad := []byte(tok)
	bad[len(bad)-1] ^= 0x01
	if _, ok := s.fromMemory("i", "u", string(bad), now); ok {
		t.Error("an altered token was answered from memory")
	}
	if _, ok := s.fromMemory("i", "v", tok, now); ok {
		t.Error("another shopper's token was answered from memory")
	}
	s.observe("i", lineView{status: lineLive, admitted: 5, at: now})
	a, _ := s.fromMemory("i", "u", tok, now)
	b, _ := s.fromMemory("i", "u", tok, now)
	if a.Position != 5 || a.Token == tok || b.Token != a.Token {
		t.Fatalf("after the line moved: %+v / %+v", a, b)
	}
	if c, ok := signer.verifyTicket(a.Token, "i", "u"); !ok || c.seen != 5 || c.line != 10 {
		t.Fatalf("re-signed token: %+v %v", c, ok)
	}
	// An instance that has seen fewer admissions still never shows a larger position.
	s2 := &Store{signer: signer}
	s2.observe("i", lineView{status: lineLive, admitted: 4, at: now})
	if tk, ok := s2.fromMemory("i", "u", a.Token, now); !ok || tk.Position != 5 {
		t.Fatalf("on a staler instance: %+v %v", tk, ok)
	}
}

// BenchmarkTicketCheck: what a poll's token check costs with 20,000 shoppers' tokens in random
// order: found in the table of checked tokens, verified (base64 and HMAC), and a re-signing.
// Run: go test -run='^$' -bench=TicketCheck -benchmem ./internal/queue/
func BenchmarkTicketCheck(b *testing.B) {
	signer, _ := NewSigner([]byte("a waiting-room test secret of 32+ bytes"))
	const n = 20000
	toks := make([]string, n)
	users := make([]string, n)
	s := &Store{signer: signer}
	for i := range toks {
		users[i] = "w" + strconv.Itoa(i)
		c := ticketClaims{item: "line", user: users[i], state: 'w', line: int64(i + 2), seen: 0}
		toks[i] = signer.signTicket(c)
		s.checked.put(toks[i], c)
	}
	order := rand.Perm(n)
	b.Run("cache", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			j := order[i%n]
			if e := s.checked.get(toks[j]); e != nil && e.claims.user != users[j] {
				b.Fatal("wrong")
			}
		}
	})
	b.Run("verify", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			j := order[i%n]
			if _, ok := signer.verifyTicket(toks[j], "line", users[j]); !ok {
				b.Fatal("bad")
			}
		}
	})
	b.Run("sign", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			signer.signTicket(ticketClaims{item: "line", user: users[i%n], state: 'w', line: 5, seen: 1})
		}
	})
}
