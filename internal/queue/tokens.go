package queue

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"hash"
	"strconv"
	"strings"
	"sync"
)

// Signer signs and checks the waiting room's tokens with HMAC-SHA256, without Redis. A token
// ("<key id>.<payload>.<mac>") names its key: the first signs, all verify, so secrets rotate.
// The MAC covers item and user; a ticket's token omits them, as every poll names them already.
type Signer struct {
	keys []signingKey // keys[0] signs
}

type signingKey struct {
	id    string
	state sync.Pool // *macState with this key
}

// macState is one HMAC with its scratch buffers, pooled per key: a poll that signs or checks a
// token copies, decodes and hashes in these instead of allocating.
type macState struct {
	h       hash.Hash
	payload [maxBound + maxPayload]byte // what is signed: what the request binds, then the payload
	tok     [maxToken]byte              // a token being built, or its base64 parts being decoded
	sum     [sha256.Size]byte
}

const (
	macLen     = 16  // how much of the HMAC-SHA256 a token carries: 128 bits
	maxToken   = 512 // longer tokens are refused unread
	maxPayload = 384 // b64.DecodedLen(maxToken)
	maxBound   = 132 // the longest bound prefix: "t|" item "|" user "|", ids of at most 64 bytes
)

// NewSigner returns a signer over the given secrets (at least one; the first signs). A key id
// is the first 8 hex digits of SHA-256 of the key derived from the secret: it names a key
// without revealing it.
func NewSigner(secrets ...[]byte) (*Signer, error) {
	if len(secrets) == 0 {
		return nil, errors.New("queue: a signer needs at least one secret")
	}
	s := &Signer{keys: make([]signingKey, len(secrets))}
	for i, secret := range secrets {
		if len(secret) < 32 {
			return nil, errors.New("queue: a signing secret must be at least 32 bytes")
		}
		key := DeriveKey(secret)
		sum := sha256.Sum256(key)
		s.keys[i].id = hex.EncodeToString(sum[:4])
		s.keys[i].state.New = func() any { return &macState{h: hmac.New(sha256.New, key)} }
	}
	return s, nil
}

// DeriveKey turns a configured secret (FLASHSALE_QUEUE_SECRET, or the JWT secret when that is
// unset) into the waiting room's own HMAC key, so the same secret never signs two kinds of
// token.
func DeriveKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("flashsale waiting room v1"))
	return m.Sum(nil)
}

// KeyID is the id of the key that signs new tokens.
func (s *Signer) KeyID() string { return s.keys[0].id }

// mac returns the truncated HMAC of payload (which may be st.payload itself).
func (st *macState) mac(payload []byte) [macLen]byte {
	st.h.Reset()
	st.h.Write(payload)
	var out [macLen]byte
	copy(out[:], st.h.Sum(st.sum[:0]))
	return out
}

// b64 is strict so that a token has one spelling: unused trailing bits must be zero.
var b64 = base64.RawURLEncoding.Strict()

// seal signs signed (built in st.payload) and returns "<key id>.<payload>.<mac>" with the
// payload, signed[bound:], and the mac in base64url: one allocation, the token string. The
// first bound bytes are signed but not carried; the checker rebuilds them from the request.
func (k *signingKey) seal(st *macState, signed []byte, bound int) string {
	mac := st.mac(signed)
	b := append(st.tok[:0], k.id...)
	b = append(b, '.')
	b = b64.AppendEncode(b, signed[bound:])
	b = append(b, '.')
	b = b64.AppendEncode(b, mac[:])
	return string(b)
}

// open checks tok's signature over bind's bytes (nil: none) followed by tok's payload, and hands
// the payload to read, which must not keep it (it is a pooled buffer). It reports whether the
// signature held and read accepted the payload.
func (s *Signer) open(tok string, bind func(b []byte) []byte, read func(payload []byte) bool) bool {
	if len(tok) > maxToken {
		return false
	}
	id, rest, ok := strings.Cut(tok, ".")
	if !ok {
		return false
	}
	enc, macEnc, ok := strings.Cut(rest, ".")
	if !ok || b64.DecodedLen(len(macEnc)) != macLen {
		return false
	}
	var k *signingKey
	for i := range s.keys {
		if s.keys[i].id == id {
			k = &s.keys[i]
			break
		}
	}
	if k == nil {
		return false
	}
	st := k.state.Get().(*macState)
	defer k.state.Put(st)
	bound := 0
	if bind != nil {
		bound = len(bind(st.payload[:0]))
		if bound > maxBound {
			return false
		}
	}
	// Decode from a copy in st.tok: the string's bytes as a []byte would be an allocation.
	in := st.tok[:copy(st.tok[:], enc)]
	n, err := b64.Decode(st.payload[bound:], in)
	if err != nil {
		return false
	}
	var want [macLen]byte
	in = st.tok[:copy(st.tok[:], macEnc)]
	if m, err := b64.Decode(want[:], in); err != nil || m != macLen {
		return false
	}
	if got := st.mac(st.payload[:bound+n]); subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		return false
	}
	return read(st.payload[bound : bound+n])
}

// field cuts the next '|'-separated field off p.
func field(p []byte) (f, rest []byte) {
	f, rest, _ = bytes.Cut(p, []byte{'|'})
	return f, rest
}

func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// ticketClaims is what a ticket's token says: the ticket of user on item, in state (one of
// the packed states: w a x s), with its line number (0: not yet numbered) and the number of
// shoppers admitted ahead when it was issued (so a later answer never shows a larger position).
// The token carries "state|line|seen"; item and user are signed, not carried (ticketBound).
type ticketClaims struct {
	item, user string
	state      byte
	line, seen int64
}

// ticketBound appends the signed part of a ticket's token that the poll itself supplies:
// "t|item|user|". Ids are [A-Za-z0-9_-] (keyspace.ValidID), so "|" cannot shift a field.
func ticketBound(b []byte, item, user string) []byte {
	b = append(b, "t|"...)
	b = append(b, item...)
	b = append(b, '|')
	b = append(b, user...)
	return append(b, '|')
}

func (s *Signer) signTicket(c ticketClaims) string {
	k := &s.keys[0]
	st := k.state.Get().(*macState)
	p := ticketBound(st.payload[:0], c.item, c.user)
	bound := len(p)
	p = append(p, c.state, '|')
	p = strconv.AppendInt(p, c.line, 10)
	p = append(p, '|')
	p = strconv.AppendInt(p, c.seen, 10)
	tok := k.seal(st, p, bound)
	k.state.Put(st)
	return tok
}

// verifyTicket checks a ticket's token as user's ticket on item (the claims carry the
// caller's item and user strings, so a check allocates nothing).
func (s *Signer) verifyTicket(tok, item, user string) (ticketClaims, bool) {
	c := ticketClaims{item: item, user: user}
	ok := s.open(tok, func(b []byte) []byte { return ticketBound(b, item, user) }, func(p []byte) bool {
		state, p := field(p)
		line, seen := field(p)
		var ok1, ok2 bool
		c.line, ok1 = parseInt(line)
		c.seen, ok2 = parseInt(seen)
		if !ok1 || !ok2 || len(state) != 1 {
			return false
		}
		c.state = state[0]
		return true
	})
	return c, ok
}

// passClaims is what a pass says: pass id (the purchase script's), its owner, item and expiry.
type passClaims struct {
	item, user, id string
	expiresMS      int64
}

func (s *Signer) signPass(c passClaims) string {
	k := &s.keys[0]
	st := k.state.Get().(*macState)
	p := append(st.payload[:0], "p|"...)
	p = append(p, c.item...)
	p = append(p, '|')
	p = append(p, c.user...)
	p = append(p, '|')
	p = append(p, c.id...)
	p = append(p, '|')
	p = strconv.AppendInt(p, c.expiresMS, 10)
	tok := k.seal(st, p, 0)
	k.state.Put(st)
	return tok
}

func (s *Signer) verifyPass(tok string) (passClaims, bool) {
	var c passClaims
	ok := s.open(tok, nil, func(p []byte) bool {
		f := strings.Split(string(p), "|")
		if len(f) != 5 || f[0] != "p" {
			return false
		}
		exp, ok := parseInt([]byte(f[4]))
		c = passClaims{item: f[1], user: f[2], id: f[3], expiresMS: exp}
		return ok
	})
	return c, ok
}
