package jwtkeys

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

func write(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func pemOf(t *testing.T, typ string, der []byte, headers map[string]string) string {
	t.Helper()
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Headers: headers, Bytes: der}))
}

func spki(t *testing.T, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestLoadPEMAndJWKS(t *testing.T) {
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "idp"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	cert, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ek.PublicKey, ek)
	if err != nil {
		t.Fatal(err)
	}
	pemFile := write(t, "keys.pem", pemOf(t, "PUBLIC KEY", spki(t, &rk.PublicKey), map[string]string{"kid": "rsa-1"})+
		pemOf(t, "RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(&rk.PublicKey), map[string]string{"kid": "rsa-pkcs1"})+
		pemOf(t, "CERTIFICATE", cert, nil))
	s, err := Load(pemFile)
	if err != nil {
		t.Fatal(err)
	}
	kids := s.KIDs()
	if len(kids) != 3 || kids[0] != "rsa-1" || kids[1] != "rsa-pkcs1" || len(kids[2]) != 43 {
		t.Fatalf("kids %q: want rsa-1, rsa-pkcs1 and a thumbprint", kids)
	}

	// A JWKS as an identity provider publishes it: an encryption key beside the signing keys.
	jwk, err := jwkset.NewJWKFromKey(&ek.PublicKey, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: "ec-1", ALG: jwkset.AlgES256}})
	if err != nil {
		t.Fatal(err)
	}
	m := jwk.Marshal()
	jwks := `{"keys":[{"kty":"EC","crv":"P-256","kid":"ec-1","alg":"ES256","use":"sig","x":"` + m.X + `","y":"` + m.Y + `"},` +
		`{"kty":"EC","crv":"P-256","kid":"enc-1","use":"enc","x":"` + m.X + `","y":"` + m.Y + `"}]}`
	s, err = Load(write(t, "keys.json", jwks))
	if err != nil {
		t.Fatal(err)
	}
	if kids := s.KIDs(); len(kids) != 1 || kids[0] != "ec-1" {
		t.Fatalf("kids %q: want only ec-1 (the enc key left out)", kids)
	}
}

// RFC 7638 section 3.1's example: its key and its thumbprint.
func TestThumbprintIsRFC7638(t *testing.T) {
	n := "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"
	got := thumbprint(jwkset.JWKMarshal{KTY: jwkset.KtyRSA, N: n, E: "AQAB"})
	if want := "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"; got != want {
		t.Fatalf("thumbprint %s, want %s", got, want)
	}
}

// Every wrong file stops the start with a one-line error that says what is wrong.
func TestLoadRefuses(t *testing.T) {
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalECPrivateKey(ek)
	rsaPub := pemOf(t, "PUBLIC KEY", spki(t, &rk.PublicKey), map[string]string{"kid": "a"})
	cases := []struct{ name, text, want string }{
		{"empty", "", "neither a PEM file"},
		{"junk", "hello", "neither a PEM file"},
		{"bad json", `{"keys": [`, "not a JWKS"},
		{"no keys", `{"keys": []}`, "holds no signing key"},
		{"private pem", pemOf(t, "EC PRIVATE KEY", ecDER, nil), "public keys only"},
		{"small rsa", pemOf(t, "PUBLIC KEY", spki(t, &small.PublicKey), nil), "at least 2048"},
		{"p-384", pemOf(t, "PUBLIC KEY", spki(t, &p384.PublicKey), nil), "needs P-256"},
		{"duplicate kid", rsaPub + rsaPub, `two keys have kid "a"`},
		{"trailing junk", rsaPub + "junk", "not PEM"},
		{"other block", pemOf(t, "DH PARAMETERS", []byte{1}, nil), "want PUBLIC KEY"},
		{"bad der", pemOf(t, "PUBLIC KEY", []byte{1, 2, 3}, nil), "PEM block 1"},
		{"oct jwk", `{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"h"}]}`, "symmetric"},
		{"private jwk", `{"keys":[{"kty":"EC","crv":"P-256","d":"AA","x":"AA","y":"AA"}]}`, "private"},
		{"alg mismatch", `{"keys":[{"kty":"RSA","alg":"RS512","kid":"x","e":"AQAB","n":"` +
			jwkN(t, &rk.PublicKey) + `"}]}`, "RS256 and ES256 tokens only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(write(t, "k", c.text))
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err %v: want one line containing %q", err, c.want)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.pem")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

func jwkN(t *testing.T, pub *rsa.PublicKey) string {
	t.Helper()
	j, err := jwkset.NewJWKFromKey(pub, jwkset.JWKOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return j.Marshal().N
}

// Without a kid, the only key is tried; with several keys, such a token is refused.
func TestKidlessToken(t *testing.T) {
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ek2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tok, err := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"sub": "alice"}).SignedString(ek)
	if err != nil {
		t.Fatal(err)
	}
	one, err := Load(write(t, "one.pem", pemOf(t, "PUBLIC KEY", spki(t, &ek.PublicKey), nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jwt.Parse(tok, one.Keyfunc, jwt.WithValidMethods(Methods)); err != nil {
		t.Fatalf("kid-less token against the only key: %v", err)
	}
	two, err := Load(write(t, "two.pem", pemOf(t, "PUBLIC KEY", spki(t, &ek.PublicKey), nil)+pemOf(t, "PUBLIC KEY", spki(t, &ek2.PublicKey), nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jwt.Parse(tok, two.Keyfunc, jwt.WithValidMethods(Methods)); !errors.Is(err, ErrKidRequired) {
		t.Fatalf("kid-less token against two keys: %v, want ErrKidRequired", err)
	}
}
