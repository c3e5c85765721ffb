package httpapi

import (
	"crypto/subtle"
	"errors"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
)

// Auth mints and checks shopper tokens (HS256 JWT, sub = user id) and the admin token.
type Auth struct {
	secret     []byte
	adminToken []byte
	ttl        time.Duration
	verified   tokenCache // tokens already verified (tokencache.go)
}

// NewAuth returns an Auth with the shared JWT secret, the admin token and the token lifetime.
func NewAuth(secret, adminToken string, ttl time.Duration) *Auth {
	return &Auth{secret: []byte(secret), adminToken: []byte(adminToken), ttl: ttl}
}

// Mint signs a token for user, valid for the configured lifetime.
func (a *Auth) Mint(user string) (string, time.Time, error) {
	exp := time.Now().Add(a.ttl).UTC().Truncate(time.Second)
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
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
	_, err := jwt.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return a.secret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired())
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
	tok := bearer(c)
	if tok == "" {
		fail(c, errUnauthorized)
		return
	}
	user, err := a.User(tok) // a valid user id, or an error
	if err != nil {
		fail(c, errUnauthorized)
		return
	}
	c.Set(userKey, user)
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
