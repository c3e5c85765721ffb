package httpapi

import (
	"crypto/subtle"
	"errors"
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
	verified   tokenCache // tokens already verified (tokencache.go)
}

// TokenPolicy is what shopper tokens must satisfy beyond a good signature and an `exp`.
type TokenPolicy struct {
	Keys     *jwtkeys.Set // public keys for RS256/ES256 tokens; nil: HS256 only
	Issuer   string       // required `iss`; empty: not checked
	Audience string       // required among `aud`; empty: not checked
}

// NewAuth returns an Auth with the shared JWT secret, the admin token and the token lifetime,
// accepting HS256 tokens only; WithPolicy adds key pairs and iss/aud checks.
func NewAuth(secret, adminToken string, ttl time.Duration) *Auth {
	a := &Auth{secret: []byte(secret), adminToken: []byte(adminToken), ttl: ttl}
	return a.WithPolicy(TokenPolicy{})
}

// WithPolicy sets the token policy (call before serving). The parser is golang-jwt's, with its
// own checks: the algorithms allowed (so "none" and algorithm swaps are refused before any key
// is looked at), `exp` required, and `iss`/`aud` when set. Every token passes them before the
// token cache may hold it, and the cache is emptied here, so it holds only tokens the current
// policy passed and a cached token never skips a check.
func (a *Auth) WithPolicy(p TokenPolicy) *Auth {
	methods := []string{"HS256"}
	if p.Keys != nil {
		methods = append(methods, jwtkeys.Methods...)
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithExpirationRequired()}
	if p.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(p.Issuer))
	}
	if p.Audience != "" {
		opts = append(opts, jwt.WithAudience(p.Audience))
	}
	a.policy, a.parser = p, jwt.NewParser(opts...)
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

// Mint signs a token for user, valid for the configured lifetime.
func (a *Auth) Mint(user string) (string, time.Time, error) {
	exp := time.Now().Add(a.ttl).UTC().Truncate(time.Second)
	var aud jwt.ClaimStrings
	if a.policy.Audience != "" {
		aud = jwt.ClaimStrings{a.policy.Audience}
	}
	// Minted tokens carry the required iss/aud, so dev login keeps working under a policy.
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Issuer:    a.policy.Issuer,
		Audience:  aud,
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
	var claims jwt.RegisteredClaims
	_, err := a.parser.ParseWithClaims(token, &claims, a.key)
	if err != nil {
		return "", err
	}
	if !validUser(claims.Subject) {
		return "", errors.New("token's subject is not a valid user id")
	}
	a.verified.put(token, claims.Subject, claims.ExpiresAt.Time)
	return claims.Subject, nil
}

func (a *Auth) isAdmin(token string) bool {
	return subtle.ConstantTimeCompare([]byte(token), a.adminToken) == 1
}

func bearer(c *gin.Context) string {
	h := c.GetHeader("Authorization")
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
// first Set) was a measurable part of each answer.
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
