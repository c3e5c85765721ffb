package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/flashsale/internal/limits"
	"github.com/flashsale/flashsale/internal/metrics"
)

// openapiDoc is the contract (docs/api.md) as an OpenAPI 3 document; a test keeps it
// and the registered routes in step.
//
//go:embed openapi.json
var openapiDoc []byte

// codeError is the contract error code as a Gin error: abort attaches it to the request
// (c.Errors, which Gin empties per request and whose array it reuses), and errorCodeOf reads it
// back for the purchase-outcome metric. One shared value per code (a bounded set of constants),
// so attaching it allocates nothing; Gin's per-request context map would.
func codeError(code string) *gin.Error {
	return errorCodes.get(code, func(code string) *gin.Error {
		return &gin.Error{Err: errors.New(code), Type: gin.ErrorTypePrivate, Meta: code}
	})
}

var errorCodes metricChildren[string, *gin.Error]

// errorCodeOf is the contract error code the request was answered with ("" for none).
func errorCodeOf(c *gin.Context) string {
	if n := len(c.Errors); n > 0 {
		if code, ok := c.Errors[n-1].Meta.(string); ok {
			return code
		}
	}
	return ""
}

const (
	purchaseRoute = "/api/items/:id/purchase"
	streamRoute   = "/api/items/stream"
)

// observe records every request by route pattern (never the raw path: bounded labels), status
// and latency, purchase outcomes by the contract's words, and writes the access log. The one
// timing middleware (one clock read per request) on every request, it looks metric children up
// in lock-free caches (metricChildren), not under the vectors' locks.
func (s *Server) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	took := time.Since(start)
	route, method := c.FullPath(), c.Request.Method
	if route == "" {
		// Unknown paths and methods come from clients: don't let them mint label values.
		route, method = "unmatched", "other"
	}
	status := c.Writer.Status()
	m := httpChildren.get(httpKey{method, route, status}, func(k httpKey) httpMetrics {
		return httpMetrics{
			requests: metrics.HTTPRequests.WithLabelValues(k.method, k.route, strconv.Itoa(k.status)),
			duration: metrics.HTTPDuration.WithLabelValues(k.method, k.route),
		}
	})
	m.requests.Inc()
	if route != streamRoute { // a stream's "latency" is how long the shopper watched
		m.duration.Observe(took.Seconds())
		s.Stats.Request(took, status)
	}
	if route == purchaseRoute {
		outcome := purchaseOutcome(c)
		purchaseChildren.get(outcome, func(o string) prometheus.Counter {
			return metrics.Purchases.WithLabelValues(o)
		}).Inc()
		s.Stats.Purchase(outcome)
		// A refusal from memory may name any id: only items the catalogue knows are tallied.
		if item := c.Param("id"); outcome != "rate_limited" || s.Inventory == nil || s.Inventory.Known(c.Request.Context(), item) {
			s.Stats.Tally(item, outcome)
		}
	}
	s.access.record(c.Request.Context(), requestIDOf(c), c.Request.Method, route, status, took)
}

type httpKey struct {
	method, route string
	status        int
}

type httpMetrics struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

var (
	httpChildren     metricChildren[httpKey, httpMetrics]
	purchaseChildren metricChildren[string, prometheus.Counter]
)

// metricChildren caches a metric vector's children by label values: reads are one load of
// an immutable map, writes (the first request of each label combination, a bounded set)
// copy it. The vectors are never reset, so a cached child stays the one exported.
type metricChildren[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex
}

func (c *metricChildren[K, V]) get(k K, create func(K) V) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
	}
	next := make(map[K]V, 1)
	if old != nil {
		next = make(map[K]V, len(*old)+1)
		for ok, ov := range *old {
			next[ok] = ov
		}
	}
	v := create(k)
	next[k] = v
	c.m.Store(&next)
	return v
}

func purchaseOutcome(c *gin.Context) string {
	if code := errorCodeOf(c); code != "" {
		return code
	}
	switch {
	case !c.Writer.Written():
		return "client_gone" // aborted without an answer: the client went away
	case c.Writer.Status() == http.StatusCreated:
		return "reserved"
	case c.Writer.Status() == http.StatusOK:
		return "replayed"
	}
	return "status_" + strconv.Itoa(c.Writer.Status())
}

var defaultMetrics = metrics.Handler()

// metrics serves Deps.Metrics, or the process's metrics registry when none was given.
func (s *Server) metrics(c *gin.Context) {
	h := s.Metrics
	if h == nil {
		h = defaultMetrics
	}
	h.ServeHTTP(c.Writer, c.Request)
}

func (s *Server) openapi(c *gin.Context) {
	c.Header("Cache-Control", "no-cache")
	c.Data(http.StatusOK, "application/json", openapiDoc)
}

// Request ids: the client's own X-Request-Id when it is 1-64 printable ASCII, else a process
// prefix and a counter (unique across instances and restarts, one atomic add to mint).
var (
	requestIDPrefix = func() string {
		var b [6]byte
		if _, err := rand.Read(b[:]); err != nil {
			panic(fmt.Sprintf("httpapi: no randomness for request ids: %v", err))
		}
		return hex.EncodeToString(b[:]) + "-"
	}()
	requestSeq atomic.Uint64
)

// requestID gives every request an id, answers it in X-Request-Id and keeps it for the error
// body and every log line about the request. Its deferred recover turns a panic (a bug) into
// the contract's error body with the id, logged with the stack, instead of an empty 500.
func (s *Server) requestID(c *gin.Context) {
	id := headerValue(c.Request, "X-Request-Id")
	if !validRequestID(id) {
		var b [32]byte
		id = string(strconv.AppendUint(append(b[:0], requestIDPrefix...), requestSeq.Add(1), 36))
	}
	// The answer's header is where handlers and logs read the id back (requestIDOf).
	h := c.Writer.Header()
	h["X-Request-Id"] = []string{id}
	h["X-Content-Type-Options"] = nosniff
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p) // net/http's way to abort a response: not a bug
			}
			slog.Error("panic", "request_id", id, "method", c.Request.Method, "route", c.FullPath(),
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if !c.Writer.Written() {
				fail(c, errInternal)
			}
		}
	}()
	c.Next()
}

var nosniff = []string{"nosniff"}

// headerValue is r.Header.Get(key) for a key already in canonical form, as net/http stores
// received headers: a map lookup without canonicalising the key again (Header.Get checks and
// copies every byte of it), on the paths every request takes.
func headerValue(r *http.Request, key string) string {
	if v := r.Header[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func validRequestID(id string) bool {
	if len(id) < 1 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// requestIDOf is the request's id ("" outside a request that went through requestID), read
// from the answer's X-Request-Id header that requestID set.
func requestIDOf(c *gin.Context) string {
	if v := c.Writer.Header()["X-Request-Id"]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// AccessLog says which requests get a log line ("access": request id, method, route, status,
// ms). A sale is many thousands of requests a second, so the line is leveled: 5xx answers and
// slow requests at warn, one in Sample at info, every other at debug. At the usual info level
// a request whose line is off costs one Enabled check: no attributes are built.
type AccessLog struct {
	Slow   time.Duration // requests at least this long log at warn; 0: none by duration
	Sample int           // every Sample-th other request logs at info; 0: none
	Logger *slog.Logger  // nil: slog.Default()
}

// accessLog is AccessLog with its sampling counter.
type accessLog struct {
	AccessLog
	seen atomic.Uint64
}

// level is the level of a request's line. A catalogue stream is never slow: it lasts as long
// as its shopper watches, and its end (the client went) is normal.
func (l *accessLog) level(route string, status int, took time.Duration) slog.Level {
	switch {
	case status >= 500 || (l.Slow > 0 && took >= l.Slow && route != streamRoute):
		return slog.LevelWarn
	case l.Sample > 0 && l.seen.Add(1)%uint64(l.Sample) == 0:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// record logs one request, if its level is on.
func (l *accessLog) record(ctx context.Context, id, method, route string, status int, took time.Duration) {
	lg := l.Logger
	if lg == nil {
		lg = slog.Default()
	}
	level := l.level(route, status, took)
	if !lg.Enabled(ctx, level) {
		return
	}
	lg.LogAttrs(ctx, level, "access", slog.String("request_id", id), slog.String("method", method),
		slog.String("route", route), slog.Int("status", status),
		slog.Float64("ms", float64(took.Microseconds())/1000))
}

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

// limit returns middleware applying the named policy to the caller: the token's user, else the
// client IP (X-Forwarded-For only from a trusted proxy, so a client cannot pick its key). It
// fails closed: when Redis cannot decide, the answer is 503, since a sale would rather turn
// buyers away for a moment than let bots through unlimited.
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
