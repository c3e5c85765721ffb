package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/limits"
)

// Names of the limiter's policies; they also name the policy in the RateLimit-Policy header.
// The purchase limit is not here: it is folded into the purchase script (inventory.Options).
const (
	policyPay       = "pay"
	policyCancel    = "cancel"
	policyRating    = "rating"
	policyLoginIP   = "login_ip"
	policyLoginUser = "login_user"
	policyReads     = "reads" // in memory (Server.reads), not the limiter's
)

// RatePolicies names the limits for the limiter. Passing new ones to Limiter.SetPolicies
// reloads them while the api serves.
func RatePolicies(l RateLimits) map[string]limits.Policy {
	return map[string]limits.Policy{
		policyPay:       l.Pay,
		policyCancel:    l.Cancel,
		policyRating:    l.Rating,
		policyLoginIP:   l.LoginIP,
		policyLoginUser: l.LoginUser,
	}
}

// limit returns middleware applying the named policy to the caller: the user id from the
// token (requireUser runs first), else the client IP. Client IPs come from X-Forwarded-For only
// when the direct peer is a trusted proxy (FLASHSALE_TRUSTED_PROXIES, none by default), so a
// client cannot pick its own key by sending the header.
//
// It fails closed: when Redis cannot decide, the request is answered 503 unavailable and never
// reaches the handler. A flash sale would rather turn buyers away for a moment than let bots
// through unlimited while the limiter is blind.
func (s *Server) limit(policy string) gin.HandlerFunc {
	return func(c *gin.Context) {
		subject := userOf(c)
		if subject == "" {
			subject = clientKey(c)
		}
		s.applyLimits(c, check{policy: policy, subject: subject})
	}
}

// limitLogin limits POST /api/login per client IP and per requested user: the IP policy stops
// one client minting tokens for many names, the user policy stops many clients hammering one
// name. It peeks at the body for the user and puts it back for the login handler. A body that
// does not name a valid user is limited by IP only; the handler then answers 400 or 413.
func (s *Server) limitLogin(c *gin.Context) {
	if !s.Options.DevLogin {
		return // the route answers 404: nothing to protect
	}
	// The body is read only once the client's IP is allowed: a refused client costs no read.
	s.applyLimits(c, check{policy: policyLoginIP, subject: clientKey(c)},
		check{policy: policyLoginUser, lazy: func() string { return s.peekLoginUser(c) }})
}

// clientKey is who a per-client limit counts: the client's IPv4 address, or the /64 network of
// an IPv6 one. One subscriber or host is routinely given a whole /64, so counting each IPv6
// address apart would hand a single client 2^64 budgets.
func clientKey(c *gin.Context) string {
	ip := c.ClientIP()
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is6() {
		return ip
	}
	if a.Is4In6() {
		return a.Unmap().String() // ::ffff:192.0.2.1 is 192.0.2.1's budget
	}
	p, _ := a.WithZone("").Prefix(64)
	return p.String()
}

// check is one policy applied to one subject; lazy, when set, finds the subject only if the
// checks before it allowed the request ("" skips the check).
type check struct {
	policy, subject string
	lazy            func() string
}

// applyLimits runs the checks in order and stops at the first refusal, so a refused request
// takes no cell of the later policies. The headers describe the refusing policy, or else the
// one with the fewest requests left.
func (s *Server) applyLimits(c *gin.Context, checks ...check) {
	if s.Limiter == nil {
		return // no limiter wired (tests of other capabilities)
	}
	var (
		shown  limits.Decision
		name   string
		policy limits.Policy
	)
	for _, ch := range checks {
		p, on := s.Limiter.Policy(ch.policy)
		if !on {
			continue
		}
		if ch.lazy != nil {
			if ch.subject = ch.lazy(); ch.subject == "" {
				continue
			}
		}
		d, err := s.Limiter.Allow(c.Request.Context(), ch.policy, ch.subject)
		if err != nil {
			fail(c, err) // unknown error: logged, 503 unavailable (fail closed)
			return
		}
		if name == "" || !d.Allowed || d.Remaining < shown.Remaining {
			shown, name, policy = d, ch.policy, p
		}
		if !d.Allowed {
			break
		}
	}
	if name == "" {
		return
	}
	setRateLimitHeaders(c, name, limits.Policy{Rate: policy.Rate, Period: policy.Period, Burst: policy.Burst}, shown)
	if !shown.Allowed {
		fail(c, fmt.Errorf("%w: %s limit reached, retry in %s", limits.ErrRateLimited,
			strings.ReplaceAll(name, "_", " "), c.Writer.Header().Get("Retry-After")+"s"))
	}
}

// allowRead applies the per-user read limit (Options.Limits.Reads) in this api's memory: no
// Redis call, so it costs the hot path nothing. It sets the RateLimit headers; false means the
// request was answered 429 rate_limited.
func (s *Server) allowRead(c *gin.Context, user string) bool {
	if s.reads == nil {
		return true
	}
	d := s.reads.Allow(user, time.Now())
	setRateLimitHeaders(c, policyReads, s.reads.Policy(), d)
	if !d.Allowed {
		fail(c, fmt.Errorf("%w: reads limit reached, retry in %ss", limits.ErrRateLimited, c.Writer.Header().Get("Retry-After")))
		return false
	}
	return true
}

// peekLoginUser reads the login body (at most maxBody+1 bytes), restores it for the handler,
// and returns the valid user id it names, or "".
func (s *Server) peekLoginUser(c *gin.Context) string {
	if c.Request.Body == nil || c.Request.ContentLength > maxBody {
		return ""
	}
	head, err := io.ReadAll(io.LimitReader(c.Request.Body, maxBody+1))
	// The handler must see exactly what the client sent: what was read, then the rest (an
	// oversized body stays oversized, a read error stays an error).
	c.Request.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), c.Request.Body), c.Request.Body}
	if err != nil || len(head) > maxBody {
		return ""
	}
	var body struct {
		User string `json:"user"`
	}
	if json.Unmarshal(head, &body) != nil || !validUser(body.User) {
		return ""
	}
	return body.User
}
