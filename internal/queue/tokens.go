package queue

import (
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

// Signer signs and checks the waiting room's tokens (a ticket's token, a pass) with HMAC-SHA256,
// so the api checks them without a Redis call. Each token names the key that signed it
// ("<key id>.<payload>.<mac>", base64url): the first key signs, every key verifies, so a new
// secret can be put first while tokens signed with the old one still verify until it is
// dropped. A token is bound to its item and user (both in the signed payload).
type Signer struct {
	keys []signingKey // keys[0] signs
}

type signingKey struct {
	id   string
	macs sync.Pool // hash.Hash (HMAC-SHA256 with this key), reused: a poll signs or checks one
}

// macLen is how much of the HMAC-SHA256 a token carries: 128 bits.
const macLen = 16

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
		s.keys[i].macs.New = func() any { return hmac.New(sha256.New, key) }
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

func (k *signingKey) mac(payload string) []byte {
	h := k.macs.Get().(hash.Hash)
	h.Reset()
	h.Write([]byte(payload))
	var sum [sha256.Size]byte
	out := h.Sum(sum[:0])
	k.macs.Put(h)
	return out[:macLen]
}

var b64 = base64.RawURLEncoding

// sign returns "<key id>.<payload>.<mac>" with the payload and mac in base64url.
func (s *Signer) sign(payload string) string {
	k := &s.keys[0]
	mac := k.mac(payload)
	var b strings.Builder
	b.Grow(len(k.id) + 2 + b64.EncodedLen(len(payload)) + b64.EncodedLen(macLen))
	b.WriteString(k.id)
	b.WriteByte('.')
	b.WriteString(b64.EncodeToString([]byte(payload)))
	b.WriteByte('.')
	b.WriteString(b64.EncodeToString(mac))
	return b.String()
}

// verify returns the payload of a token signed by one of the keys.
func (s *Signer) verify(tok string) (string, bool) {
	if len(tok) > 512 {
		return "", false
	}
	id, rest, ok := strings.Cut(tok, ".")
	if !ok {
		return "", false
	}
	enc, macEnc, ok := strings.Cut(rest, ".")
	if !ok || b64.DecodedLen(len(macEnc)) != macLen {
		return "", false
	}
	for i := range s.keys {
		k := &s.keys[i]
		if k.id != id {
			continue
		}
		var pbuf [384]byte
		n, err := b64.Decode(pbuf[:], []byte(enc))
		if err != nil {
			return "", false
		}
		var mbuf [macLen]byte
		if m, err := b64.Decode(mbuf[:], []byte(macEnc)); err != nil || m != macLen {
			return "", false
		}
		payload := string(pbuf[:n])
		if subtle.ConstantTimeCompare(k.mac(payload), mbuf[:]) != 1 {
			return "", false
		}
		return payload, true
	}
	return "", false
}

// ticketClaims is what a ticket's token says: the ticket of user on item, in state (one of
// the packed states: w a x s), with its line number (0: not yet numbered) and the number of
// shoppers admitted ahead when it was issued (so a later answer never shows a larger position).
type ticketClaims struct {
	item, user string
	state      byte
	line, seen int64
}

func (s *Signer) signTicket(c ticketClaims) string {
	return s.sign("t|" + c.item + "|" + c.user + "|" + string(c.state) + "|" +
		strconv.FormatInt(c.line, 10) + "|" + strconv.FormatInt(c.seen, 10))
}

func (s *Signer) verifyTicket(tok string) (ticketClaims, bool) {
	p, ok := s.verify(tok)
	if !ok {
		return ticketClaims{}, false
	}
	f := strings.Split(p, "|")
	if len(f) != 6 || f[0] != "t" || len(f[3]) != 1 {
		return ticketClaims{}, false
	}
	line, err1 := strconv.ParseInt(f[4], 10, 64)
	seen, err2 := strconv.ParseInt(f[5], 10, 64)
	if err1 != nil || err2 != nil {
		return ticketClaims{}, false
	}
	return ticketClaims{item: f[1], user: f[2], state: f[3][0], line: line, seen: seen}, true
}

// passClaims is what a pass says: pass id (the purchase script's), its owner, item and expiry.
type passClaims struct {
	item, user, id string
	expiresMS      int64
}

func (s *Signer) signPass(c passClaims) string {
	return s.sign("p|" + c.item + "|" + c.user + "|" + c.id + "|" + strconv.FormatInt(c.expiresMS, 10))
}

func (s *Signer) verifyPass(tok string) (passClaims, bool) {
	p, ok := s.verify(tok)
	if !ok {
		return passClaims{}, false
	}
	f := strings.Split(p, "|")
	if len(f) != 5 || f[0] != "p" {
		return passClaims{}, false
	}
	exp, err := strconv.ParseInt(f[4], 10, 64)
	if err != nil {
		return passClaims{}, false
	}
	return passClaims{item: f[1], user: f[2], id: f[3], expiresMS: exp}, true
}
