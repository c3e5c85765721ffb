// Package jwtkeys owns the public keys of an identity provider that signs shopper tokens with a
// key pair (RS256, ES256), loaded from a PEM or JWKS file, and picks a token's key by its `kid`.
// MicahParks/jwkset and keyfunc parse and look up; this package adds the policy: public signing
// keys of those two algorithms, every key named, a token without `kid` only with one key to try.
package jwtkeys

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
)

// Methods are the signing algorithms a Set verifies.
var Methods = []string{"RS256", "ES256"}

// ErrKidRequired is a token without `kid` when the set holds several keys: trying each would
// let a key meant for something else vouch for a shopper.
var ErrKidRequired = errors.New("jwtkeys: token has no kid and the key file holds several keys")

// minRSABits refuses keys that no identity provider should still sign with.
const minRSABits = 2048

// Set is the loaded keys. It is read-only after Load and safe for concurrent use.
type Set struct {
	kf   keyfunc.Keyfunc
	kids []string
}

// Load reads a PEM file (PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE blocks, named by a `kid:`
// header) or a JWKS file; an unnamed key is named by its RFC 7638 thumbprint, "use": "enc" keys
// are left out. Private or symmetric keys, another algorithm or curve, RSA under 2048 bits or a
// kid twice are one-line errors, so a wrong file stops the binary at start, not shoppers later.
func Load(path string) (*Set, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var keys []named
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '{' {
		keys, err = fromJWKS(t)
	} else {
		keys, err = fromPEM(raw)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %s", path, oneLine(err))
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: holds no signing key", path)
	}
	store := jwkset.NewMemoryStorage()
	s := &Set{}
	for _, k := range keys {
		jwk, err := jwkOf(k)
		if err != nil {
			return nil, fmt.Errorf("%s: %s", path, oneLine(err))
		}
		kid := jwk.Marshal().KID
		for _, seen := range s.kids {
			if seen == kid {
				return nil, fmt.Errorf("%s: two keys have kid %q", path, kid)
			}
		}
		s.kids = append(s.kids, kid)
		if err := store.KeyWrite(context.Background(), jwk); err != nil {
			return nil, fmt.Errorf("%s: %s", path, oneLine(err))
		}
	}
	if s.kf, err = keyfunc.New(keyfunc.Options{Storage: store}); err != nil {
		return nil, fmt.Errorf("%s: %s", path, oneLine(err))
	}
	return s, nil
}

// Keyfunc is a jwt.Keyfunc: the key named by the token's kid, checked against the key's
// algorithm (keyfunc does both); without a kid, the only key, or ErrKidRequired. Give the
// parser jwt.WithValidMethods(Methods) as well: this never hands out a shared secret, so an
// HS256 token "signed" with a public key cannot verify.
func (s *Set) Keyfunc(t *jwt.Token) (any, error) {
	if _, ok := t.Header["kid"]; !ok && len(s.kids) > 1 {
		return nil, ErrKidRequired
	}
	return s.kf.Keyfunc(t)
}

// KIDs are the key ids, in file order (for the start-up log).
func (s *Set) KIDs() []string { return append([]string(nil), s.kids...) }

// named is a public key, its algorithm and its kid ("" until jwkOf fills in the thumbprint).
type named struct {
	pub any
	alg jwkset.ALG
	kid string
}

func fromPEM(raw []byte) ([]named, error) {
	var keys []named
	for n := 1; ; n++ {
		var b *pem.Block
		b, raw = pem.Decode(raw)
		if b == nil {
			break
		}
		var pub any
		var err error
		switch {
		case strings.Contains(b.Type, "PRIVATE KEY"):
			return nil, fmt.Errorf("PEM block %d is a %s: give the identity provider's public keys only", n, b.Type)
		case b.Type == "PUBLIC KEY":
			pub, err = x509.ParsePKIXPublicKey(b.Bytes)
		case b.Type == "RSA PUBLIC KEY":
			pub, err = x509.ParsePKCS1PublicKey(b.Bytes)
		case b.Type == "CERTIFICATE":
			var c *x509.Certificate
			if c, err = x509.ParseCertificate(b.Bytes); err == nil {
				pub = c.PublicKey
			}
		default:
			return nil, fmt.Errorf("PEM block %d is a %q: want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE", n, b.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		alg, err := algOf(pub, "")
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		keys = append(keys, named{pub: pub, alg: alg, kid: b.Headers["kid"]})
	}
	if len(keys) == 0 {
		return nil, errors.New("neither a PEM file of public keys nor a JWKS (JSON) file")
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		return nil, errors.New("text after the last PEM block is not PEM")
	}
	return keys, nil
}

func fromJWKS(raw []byte) ([]named, error) {
	var set jwkset.JWKSMarshal
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("not a JWKS: %w", err)
	}
	var keys []named
	for i, m := range set.Keys {
		if m.USE == jwkset.UseEnc {
			continue // an encryption key published beside the signing keys
		}
		if m.D != "" || m.KTY == jwkset.KtyOct {
			return nil, fmt.Errorf("key %d (kid %q) holds private or symmetric key material: give the public keys only", i+1, m.KID)
		}
		jwk, err := jwkset.NewJWKFromMarshal(m, jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
		if err != nil {
			return nil, fmt.Errorf("key %d (kid %q): %w", i+1, m.KID, err)
		}
		alg, err := algOf(jwk.Key(), m.ALG)
		if err != nil {
			return nil, fmt.Errorf("key %d (kid %q): %w", i+1, m.KID, err)
		}
		keys = append(keys, named{pub: jwk.Key(), alg: alg, kid: m.KID})
	}
	return keys, nil
}

// algOf is the one algorithm a public key verifies: RS256 for RSA, ES256 for EC P-256. A key
// whose file says another algorithm is refused rather than used for the wrong one.
func algOf(pub any, declared jwkset.ALG) (jwkset.ALG, error) {
	var alg jwkset.ALG
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return "", fmt.Errorf("RSA key of %d bits: want at least %d", k.N.BitLen(), minRSABits)
		}
		alg = jwkset.AlgRS256
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return "", fmt.Errorf("EC key on %s: ES256 needs P-256", k.Curve.Params().Name)
		}
		alg = jwkset.AlgES256
	default:
		return "", fmt.Errorf("a %T key: want RSA (RS256) or EC P-256 (ES256)", pub)
	}
	if declared != "" && declared != alg {
		return "", fmt.Errorf("alg %s: the api verifies RS256 and ES256 tokens only", declared)
	}
	return alg, nil
}

// jwkOf makes the stored JWK, named by its RFC 7638 thumbprint when the file gave no kid.
func jwkOf(k named) (jwkset.JWK, error) {
	opts := jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{ALG: k.alg, KID: k.kid, USE: jwkset.UseSig}}
	if opts.Metadata.KID == "" {
		bare, err := jwkset.NewJWKFromKey(k.pub, jwkset.JWKOptions{})
		if err != nil {
			return jwkset.JWK{}, err
		}
		opts.Metadata.KID = thumbprint(bare.Marshal())
	}
	return jwkset.NewJWKFromKey(k.pub, opts)
}

// thumbprint is RFC 7638's: SHA-256 of the required members in lexicographic order.
func thumbprint(m jwkset.JWKMarshal) string {
	var canon string
	if m.KTY == jwkset.KtyRSA {
		canon = fmt.Sprintf(`{"e":%q,"kty":"RSA","n":%q}`, m.E, m.N)
	} else {
		canon = fmt.Sprintf(`{"crv":%q,"kty":"EC","x":%q,"y":%q}`, m.CRV, m.X, m.Y)
	}
	sum := sha256.Sum256([]byte(canon))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// oneLine flattens errors.Join's newlines so a start-up error stays one line.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
