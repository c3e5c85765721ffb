package httpapi

import (
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"

	"github.com/flashsale/flashsale/internal/jwtkeys"
)

// Auth mints and checks shopper tokens (JWT, sub = user id) and the admin token. Its own
// tokens (dev login, a service sharing the secret) are HS256; an identity provider's are
// RS256/ES256, verified with the public keys of TokenPolicy.Keys.
type Auth struct {
	secret     []byte
	adminToken []byte
	ttl        time.Duration
	policy     TokenPolicy
	parser     *jwt.Parser
	verified   tokenCache // tokens already verified (auth_tokens.go)
}

// TokenPolicy is what shopper tokens must satisfy beyond a good signature and an `exp`.
type TokenPolicy struct {
	Keys     *jwtkeys.Set // public keys for RS256/ES256 tokens, and then no HS256; nil: HS256 only
	Issuer   string       // required `iss`; empty: not checked
	Audience string       // required among `aud`; empty: not checked
	// DevLogin accepts the tokens POST /api/login mints under an iss/aud policy (they carry
	// DevIssuer, never the policy's iss/aud, so they are never taken for the shop's).
	DevLogin bool
}

// DevIssuer is the `iss` of the tokens dev login mints while an issuer or audience is required.
const DevIssuer = "flashsale-dev-login"

// NewAuth returns an Auth with the shared JWT secret, the admin token and the token lifetime,
// accepting HS256 tokens only; WithPolicy adds key pairs and iss/aud checks.
func NewAuth(secret, adminToken string, ttl time.Duration) *Auth {
	a := &Auth{secret: []byte(secret), adminToken: []byte(adminToken), ttl: ttl}
	return a.WithPolicy(TokenPolicy{})
}

// WithPolicy sets the token policy (call before serving): golang-jwt's checks (allowed
// algorithms, so "none" and swaps are refused; `exp` required; `iss`/`aud` when set) pass before
// a token is cached, and the cache is emptied here, so no cached token skips a check. With a
// key file HS256 is refused: only the identity provider signs.
func (a *Auth) WithPolicy(p TokenPolicy) *Auth {
	methods := []string{"HS256"}
	if p.Keys != nil {
		methods = jwtkeys.Methods
	}
	a.policy, a.parser = p, jwt.NewParser(jwt.WithValidMethods(methods), jwt.WithExpirationRequired())
	a.verified = tokenCache{}
	return a
}

// key picks the verification key by the token's algorithm, which the parser has already
// checked against the allowed list: the shared secret for HS256 and nothing else, the key
// file's key (by kid) for RS256/ES256. A public key is thus never an HMAC secret.
func (a *Auth) key(t *jwt.Token) (any, error) {
	if t.Method == jwt.SigningMethodHS256 {
		return a.secret, nil
	}
	if a.policy.Keys == nil {
		return nil, errors.New("no key file for asymmetric tokens")
	}
	return a.policy.Keys.Keyfunc(t)
}

// underPolicy reports whether an issuer or audience is required of shopper tokens.
func (p TokenPolicy) underPolicy() bool { return p.Issuer != "" || p.Audience != "" }

// Mint signs a token for user, valid for the configured lifetime. Under an iss/aud policy it
// carries DevIssuer and no audience: it is accepted while dev login is on, never as the shop's.
func (a *Auth) Mint(user string) (string, time.Time, error) {
	exp := time.Now().Add(a.ttl).UTC().Truncate(time.Second)
	iss := ""
	if a.policy.underPolicy() {
		iss = DevIssuer
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Issuer:    iss,
		Subject:   user,
		ExpiresAt: jwt.NewNumericDate(exp),
		IssuedAt:  jwt.NewNumericDate(time.Now()),
	})
	s, err := tok.SignedString(a.secret)
	return s, exp, err
}

// User verifies a shopper token and returns its subject.
func (a *Auth) User(token string) (string, error) {
	if user, ok := a.verified.get(token, time.Now()); ok {
		return user, nil
	}
	if err := strictJWT(token); err != nil {
		return "", err
	}
	var claims jwt.RegisteredClaims
	_, err := a.parser.ParseWithClaims(token, &claims, a.key)
	if err != nil {
		return "", err
	}
	if err := a.policy.check(&claims); err != nil {
		return "", err
	}
	if !validUser(claims.Subject) {
		return "", errors.New("token's subject is not a valid user id")
	}
	a.verified.put(token, claims.Subject, claims.ExpiresAt.Time)
	return claims.Subject, nil
}

// check applies the iss/aud policy to a token whose signature and exp are good. A dev-login
// token (HS256 only: a key file turns HS256 off) passes while dev login is on, and only then.
func (p TokenPolicy) check(c *jwt.RegisteredClaims) error {
	if !p.underPolicy() {
		return nil
	}
	if c.Issuer == DevIssuer {
		if !p.DevLogin {
			return errors.New("a dev-login token, and dev login is off")
		}
		return nil
	}
	if p.Issuer != "" && c.Issuer != p.Issuer {
		return errors.New("token has the wrong issuer")
	}
	if p.Audience != "" && !slices.Contains(c.Audience, p.Audience) {
		return errors.New("token has the wrong audience")
	}
	return nil
}

// strictJWT refuses a token that readers could read two ways, before golang-jwt reads it:
// a header or payload with a name twice (encoding/json keeps the last, another reader the
// first), a `crit` header (extensions the api does not implement: RFC 7515 4.1.11 says
// refuse), and `exp`, `nbf` or `iat` that is not a JSON number (golang-jwt takes "123").
func strictJWT(token string) error {
	header, rest, ok := strings.Cut(token, ".")
	payload, _, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return errors.New("token is not three parts")
	}
	for i, part := range []string{header, payload} {
		b, err := base64.RawURLEncoding.DecodeString(part)
		if err != nil || !json.Valid(b) {
			return errors.New("token part is not base64url JSON")
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return errors.New("token part is not a JSON object")
		}
		if err := (&nameCheck{b: b}).value(nil); err != nil {
			return errors.New("token has a name twice")
		}
		if i == 0 {
			if _, ok := m["crit"]; ok {
				return errors.New("token header has crit")
			}
			continue
		}
		for _, name := range []string{"exp", "nbf", "iat"} {
			if v, ok := m[name]; ok && !jsonNumber(v) {
				return fmt.Errorf("token's %s is not a number", name)
			}
		}
	}
	return nil
}

// jsonNumber reports whether v, valid JSON, is a number (which starts with '-' or a digit).
func jsonNumber(v json.RawMessage) bool {
	return len(v) > 0 && (v[0] == '-' || v[0] >= '0' && v[0] <= '9')
}

func (a *Auth) isAdmin(token string) bool {
	return subtle.ConstantTimeCompare([]byte(token), a.adminToken) == 1
}

func bearer(c *gin.Context) string {
	h := headerValue(c.Request, "Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

const userKey = "flashsale.user"

// requireUser admits shopper tokens and puts the user id into the context.
func (a *Auth) requireUser(c *gin.Context) {
	if user, ok := a.verify(c); ok {
		c.Set(userKey, user)
	}
}

// shopper admits shopper tokens like requireUser and hands the user id to h as an argument:
// for the purchase route, the api's hottest, where Gin's context map (made per request on the
// first Set) would cost every answer.
func (a *Auth) shopper(h func(c *gin.Context, user string)) gin.HandlerFunc {
	return func(c *gin.Context) {
		if user, ok := a.verify(c); ok {
			h(c, user)
		}
	}
}

// verify checks the request's bearer token and returns its user id; a missing or bad token is
// answered 401 and ok is false.
func (a *Auth) verify(c *gin.Context) (user string, ok bool) {
	tok := bearer(c)
	if tok == "" {
		fail(c, errUnauthorized)
		return "", false
	}
	user, err := a.User(tok) // a valid user id, or an error
	if err != nil {
		fail(c, errUnauthorized)
		return "", false
	}
	return user, true
}

// requireAdmin admits only the admin token; a valid shopper token is 403.
func (a *Auth) requireAdmin(c *gin.Context) {
	tok := bearer(c)
	if tok == "" {
		fail(c, errUnauthorized)
		return
	}
	if a.isAdmin(tok) {
		return
	}
	if _, err := a.User(tok); err == nil {
		fail(c, errForbidden)
		return
	}
	fail(c, errUnauthorized)
}

func userOf(c *gin.Context) string { return c.GetString(userKey) }
