package httpapi_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/httpapi"
	"github.com/flashsale/flashsale/internal/jwtkeys"
)

// idp is an identity provider's key pairs, and the PEM file of its public keys the api reads.
type idp struct {
	rsa, otherRSA *rsa.PrivateKey
	ec            *ecdsa.PrivateKey
	pem           []byte // public keys: kid rsa-1 (rsa), kid ec-1 (ec)
}

func newIdP(t *testing.T) idp {
	t.Helper()
	var p idp
	var err error
	if p.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	if p.otherRSA, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	if p.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	for kid, pub := range map[string]any{"rsa-1": &p.rsa.PublicKey, "ec-1": &p.ec.PublicKey} {
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		p.pem = append(p.pem, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Headers: map[string]string{"kid": kid}, Bytes: der})...)
	}
	return p
}

func (p idp) file(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "idp.pem")
	if err := os.WriteFile(f, p.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func sign(t *testing.T, m jwt.SigningMethod, kid string, key any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Shopper tokens from an identity provider (RS256/ES256 by kid, iss and aud required) are
// accepted on shopper routes, and every forgery or misfit is 401 — including the classic
// algorithm confusions: alg "none", and an HS256 token whose "secret" is the public key.
func TestIdentityProviderTokens(t *testing.T) {
	p := newIdP(t)
	const iss, aud = "https://idp.example.test/", "flashsale"
	a := newTestAPI(t, func(c *config.Config) {
		keys, err := jwtkeys.Load(p.file(t))
		if err != nil {
			t.Fatal(err)
		}
		c.JWTKeys, c.JWTIssuer, c.JWTAudience = keys, iss, aud
	})
	exp := time.Now().Add(time.Hour).Unix()
	good := func() jwt.MapClaims { return jwt.MapClaims{"sub": "alice", "exp": exp, "iss": iss, "aud": aud} }
	with := func(k string, v any) jwt.MapClaims { c := good(); c[k] = v; return c }
	without := func(k string) jwt.MapClaims { c := good(); delete(c, k); return c }
	pubPEM := p.pem[:strings.Index(string(p.pem), "-----END PUBLIC KEY-----")+len("-----END PUBLIC KEY-----\n")]
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, good()).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		token string
		want  int
	}{
		{"rs256", sign(t, jwt.SigningMethodRS256, "rsa-1", p.rsa, good()), http.StatusOK},
		{"es256", sign(t, jwt.SigningMethodES256, "ec-1", p.ec, good()), http.StatusOK},
		{"aud list", sign(t, jwt.SigningMethodRS256, "rsa-1", p.rsa, with("aud", []string{"other", aud})), http.StatusOK},
		// With a key file, HS256 is off: the shared secret (or dev login) is no IdP.
		{"own hs256 token", a.token("alice"), http.StatusUnauthorized},
		{"hs256 with the secret, iss and aud", sign(t, jwt.SigningMethodHS256, "", []byte(a.cfg.JWTSecret), good()), http.StatusUnauthorized},
		{"unknown kid", sign(t, jwt.SigningMethodRS256, "rsa-2", p.rsa, good()), http.StatusUnauthorized},
		{"no kid, several keys", sign(t, jwt.SigningMethodRS256, "", p.rsa, good()), http.StatusUnauthorized},
		{"wrong key", sign(t, jwt.SigningMethodRS256, "rsa-1", p.otherRSA, good()), http.StatusUnauthorized},
		{"kid of the other algorithm", sign(t, jwt.SigningMethodES256, "rsa-1", p.ec, good()), http.StatusUnauthorized},
		{"expired", sign(t, jwt.SigningMethodRS256, "rsa-1", p.rsa, with("exp", time.Now().Add(-time.Minute).Unix())), http.StatusUnauthorized},
		{"no exp", sign(t, jwt.SigningMethodRS256, "rsa-1", p.rsa, without("exp")), http.StatusUnauthorized},
		{"wrong iss", sign(t, jwt.SigningMethodRS256, "rsa-1", p.rsa, with("iss", "https://evil.test/")), http.StatusUnauthorized},
		{"no iss", sign(t, jwt.SigningMethodES256, "ec-1", p.ec, without("iss")), http.StatusUnauthorized},
		{"wrong aud", sign(t, jwt.SigningMethodES256, "ec-1", p.ec, with("aud", "another-shop")), http.StatusUnauthorized},
		{"no aud", sign(t, jwt.SigningMethodRS256, "rsa-1", p.rsa, without("aud")), http.StatusUnauthorized},
		{"alg none", none, http.StatusUnauthorized},
		{"hs256 with the public key", sign(t, jwt.SigningMethodHS256, "rsa-1", pubPEM, good()), http.StatusUnauthorized},
		{"hs256 with the secret but wrong iss", sign(t, jwt.SigningMethodHS256, "", []byte(a.cfg.JWTSecret), with("iss", "x")), http.StatusUnauthorized},
		{"rs384", sign(t, jwt.SigningMethodRS384, "rsa-1", p.rsa, good()), http.StatusUnauthorized},
		{"bad subject", sign(t, jwt.SigningMethodRS256, "rsa-1", p.rsa, with("sub", "no spaces allowed")), http.StatusUnauthorized},
	}
	// Twice: the second round answers good tokens from the token cache, and the bad ones must
	// still be refused (only verified tokens are ever cached).
	for round := 1; round <= 2; round++ {
		for _, c := range cases {
			r := a.do("GET", "/api/orders", c.token, nil)
			if r.Status != c.want {
				t.Errorf("round %d, %s: %d %s, want %d", round, c.name, r.Status, r.Raw, c.want)
			}
			if c.want == http.StatusUnauthorized && r.code() != "unauthorized" {
				t.Errorf("round %d, %s: code %q, want unauthorized", round, c.name, r.code())
			}
		}
	}
}

// The token cache belongs to one policy: a token that one api (no iss/aud) accepted and
// cached is still refused by an api that requires them, even with the same secret.
func TestTokenCacheKeepsPolicy(t *testing.T) {
	loose := newTestAPI(t, nil)
	tok := loose.token("alice")
	if r := loose.do("GET", "/api/orders", tok, nil); r.Status != http.StatusOK {
		t.Fatalf("loose api: %d %s", r.Status, r.Raw)
	}
	strict := newTestAPI(t, func(c *config.Config) { c.JWTIssuer, c.JWTAudience = "https://idp.test/", "flashsale" })
	for i := 0; i < 2; i++ {
		if r := strict.do("GET", "/api/orders", tok, nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("strict api, attempt %d: %d, want 401 for a token without iss/aud", i+1, r.Status)
		}
	}
	if r := strict.do("GET", "/api/orders", strict.token("alice"), nil); r.Status != http.StatusOK {
		t.Fatalf("strict api's own minted token: %d %s (dev login is on)", r.Status, r.Raw)
	}
}

// WithPolicy on an Auth that has already checked tokens: the tokens it cached under the old
// policy are checked again under the new one, not answered from the cache.
func TestWithPolicyForgetsCheckedTokens(t *testing.T) {
	a := httpapi.NewAuth("policy-test-secret-0123456789abcdef", "policy-test-admin-token-0123", time.Hour)
	tok, _, err := a.Mint("alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.User(tok); err != nil {
		t.Fatalf("loose policy: %v", err)
	}
	a.WithPolicy(httpapi.TokenPolicy{Issuer: "https://idp.test/", Audience: "flashsale"})
	if u, err := a.User(tok); err == nil {
		t.Fatalf("a token without iss/aud, cached under the old policy, accepted as %q under the new one", u)
	}
}

// A token the api minted (dev login) is never taken for the identity provider's:
// under an iss/aud policy it carries the dev-login issuer instead of the shop's, and is
// accepted only while dev login is on; an api with dev login off refuses it though it shares
// the secret, the issuer and the audience.
func TestDevLoginTokensAreNotTheIdPs(t *testing.T) {
	const iss, aud = "https://idp.example.test/", "flashsale"
	policy := func(dev bool) func(c *config.Config) {
		return func(c *config.Config) { c.JWTIssuer, c.JWTAudience, c.DevLogin = iss, aud, dev }
	}
	on := newTestAPI(t, policy(true))
	r := on.do("POST", "/api/login", "", map[string]any{"user": "mallory"})
	if r.Status != http.StatusOK {
		t.Fatalf("login: %d %s", r.Status, r.Raw)
	}
	tok := r.Body["token"].(string)
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(tok, claims); err != nil {
		t.Fatal(err)
	}
	if claims["iss"] == iss || claims["aud"] != nil {
		t.Errorf("a minted token carries the identity provider's iss/aud: %v", claims)
	}
	if r := on.do("GET", "/api/orders", tok, nil); r.Status != http.StatusOK {
		t.Fatalf("dev login on: its own token %d %s", r.Status, r.Raw)
	}
	off := newTestAPI(t, policy(false))
	if r := off.do("GET", "/api/orders", tok, nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("dev login off: a minted token answered %d, want 401", r.Status)
	}
	if r := off.do("POST", "/api/login", "", map[string]any{"user": "mallory"}); r.Status != http.StatusNotFound {
		t.Fatalf("dev login off: login answered %d, want 404", r.Status)
	}
	// A token of the shop's own service (shared secret, the shop's iss and aud) still works.
	shop := sign(t, jwt.SigningMethodHS256, "", []byte(off.cfg.JWTSecret),
		jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "iss": iss, "aud": aud})
	if r := off.do("GET", "/api/orders", shop, nil); r.Status != http.StatusOK {
		t.Fatalf("the shop's shared-secret token: %d %s", r.Status, r.Raw)
	}
}

// rawToken signs header and payload, given as JSON text exactly as written (duplicate names
// and all), with the HS256 secret.
func rawToken(t *testing.T, secret, header, payload string) string {
	t.Helper()
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload))
	sig, err := jwt.SigningMethodHS256.Sign(signing, []byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + enc.EncodeToString(sig)
}

// A token is read one way only. Duplicate names (encoding/json keeps the last, another
// reader the first), a `crit` header (extensions the api does not understand: RFC 7515 says
// refuse) and registered times given as strings are 401, however well signed.
func TestStrictTokenClaims(t *testing.T) {
	a := newTestAPI(t, nil)
	exp := time.Now().Add(time.Hour).Unix()
	const hs = `{"alg":"HS256","typ":"JWT"}`
	cases := []struct {
		name            string
		header, payload string
		want            int
	}{
		{"well formed", hs, fmt.Sprintf(`{"sub":"alice","exp":%d}`, exp), http.StatusOK},
		{"duplicate sub", hs, fmt.Sprintf(`{"sub":"alice","exp":%d,"sub":"bob"}`, exp), http.StatusUnauthorized},
		{"duplicate exp", hs, fmt.Sprintf(`{"sub":"alice","exp":1,"exp":%d}`, exp), http.StatusUnauthorized},
		{"duplicate escaped", hs, fmt.Sprintf(`{"sub":"alice","exp":%d,"s\u0075b":"bob"}`, exp), http.StatusUnauthorized},
		{"duplicate header alg", `{"alg":"none","alg":"HS256"}`, fmt.Sprintf(`{"sub":"alice","exp":%d}`, exp), http.StatusUnauthorized},
		{"crit header", `{"alg":"HS256","typ":"JWT","crit":["exp"]}`, fmt.Sprintf(`{"sub":"alice","exp":%d}`, exp), http.StatusUnauthorized},
		{"exp as a string", hs, fmt.Sprintf(`{"sub":"alice","exp":"%d"}`, exp), http.StatusUnauthorized},
		{"nbf as a string", hs, fmt.Sprintf(`{"sub":"alice","exp":%d,"nbf":"1"}`, exp), http.StatusUnauthorized},
		{"iat as a string", hs, fmt.Sprintf(`{"sub":"alice","exp":%d,"iat":"1"}`, exp), http.StatusUnauthorized},
		{"payload not an object", hs, `["alice"]`, http.StatusUnauthorized},
	}
	for round := 1; round <= 2; round++ { // the second round may meet the token cache
		for _, c := range cases {
			r := a.do("GET", "/api/orders", rawToken(t, a.cfg.JWTSecret, c.header, c.payload), nil)
			if r.Status != c.want {
				t.Errorf("round %d, %s: %d %s, want %d", round, c.name, r.Status, r.Raw, c.want)
			}
		}
	}
}
