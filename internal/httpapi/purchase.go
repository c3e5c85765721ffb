package httpapi

import (
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/limits"
)

func (s *Server) purchase(c *gin.Context, user string) {
	qty, err := purchaseQuantity(c)
	if err != nil {
		fail(c, err)
		return
	}
	key, err := idempotencyKey(c)
	if err != nil {
		fail(c, err)
		return
	}
	req := inventory.PurchaseRequest{ItemID: c.Param("id"), UserID: user, Quantity: qty, IdempotencyKey: key}
	pass, err := s.queuePass(c, req)
	if err != nil {
		fail(c, err)
		return
	}
	req.QueuePass = pass
	res, err := s.Inventory.Purchase(c.Request.Context(), req)
	if limit := purchaseLimitOf(res, err); limit != nil {
		setRateLimitHeaders(c, "purchase", s.Options.PurchaseLimit, *limit)
	}
	if err != nil {
		fail(c, err)
		return
	}
	status := http.StatusCreated
	if res.Replayed {
		status = http.StatusOK
	} else if pass != "" {
		s.Queue.Spent(c.Request.Header.Get("Queue-Pass"))
	}
	writeOrder(c, status, res.Order)
}

// queuePass checks a purchase's Queue-Pass header without a Redis call and returns the pass id
// for the script ("" for none). An item with a waiting room (by the snapshot) needs a valid pass,
// else 403 queue_required; for another item a genuine pass still goes on, since the script has
// the last word (a waiting room set a moment ago holds).
func (s *Server) queuePass(c *gin.Context, req inventory.PurchaseRequest) (string, error) {
	h := c.Request.Header["Queue-Pass"]
	var pass string
	if len(h) > 0 {
		pass = h[0]
	}
	if s.Queue == nil {
		return "", nil
	}
	queued := s.Inventory.HasQueue(c.Request.Context(), req.ItemID)
	if !queued && pass == "" {
		return "", nil
	}
	id, err := s.Queue.CheckPass(pass, req.ItemID, req.UserID, req.IdempotencyKey != "", time.Now())
	if err != nil && !queued {
		return "", nil
	}
	return id, err
}

// purchaseQuantity reads the body's quantity (1 when absent). The usual body is a few bytes of
// known length: it is read into a pooled buffer (net/http's body reader stops at
// Content-Length) and parsed without reflection when it has the common shape.
func purchaseQuantity(c *gin.Context) (int64, error) {
	var b []byte
	if n := c.Request.ContentLength; n >= 0 && n <= smallBody {
		bp := smallBodies.Get().(*[smallBody]byte)
		defer smallBodies.Put(bp)
		if _, err := io.ReadFull(c.Request.Body, bp[:n]); err != nil {
			return 0, errInvalid("could not read the request body")
		}
		b = bp[:n]
	} else {
		var err error
		if b, err = readBody(c, maxBody); err != nil {
			return 0, err
		}
	}
	qty, ok := quickQuantity(b)
	if !ok {
		body := struct {
			Quantity *int64 `json:"quantity"`
		}{}
		if err := strictUnmarshal(b, &body); err != nil {
			return 0, err
		}
		if body.Quantity != nil {
			qty = *body.Quantity
		}
	}
	if qty < 1 || qty > 1e9 {
		return 0, errInvalid("quantity must be a whole number from 1 to 1000000000")
	}
	return qty, nil
}

// idempotencyKey is the optional Idempotency-Key header ("" when absent).
func idempotencyKey(c *gin.Context) (string, error) {
	key, ok := c.Request.Header["Idempotency-Key"]
	if !ok {
		return "", nil
	}
	if !inventory.ValidIdempotencyKey(key[0]) {
		return "", errInvalid("Idempotency-Key must be 1-64 printable ASCII characters")
	}
	return key[0], nil
}

// purchaseLimitOf is the purchase rate limit's verdict, when the script reached it.
func purchaseLimitOf(res inventory.PurchaseResult, err error) *limits.Decision {
	if err == nil {
		return res.Limit
	}
	pe, ok := err.(*inventory.PurchaseError) // unwrapped as Purchase returns it, usually
	if !ok && !errors.As(err, &pe) {
		return nil
	}
	return pe.Limit
}

const smallBody = 256

var smallBodies = sync.Pool{New: func() any { return new([smallBody]byte) }}

// quickQuantity reads the common purchase bodies without reflection: none, {} and
// {"quantity":N} (N a plain decimal of at most 10 digits, whitespace around tokens allowed).
// ok is false for anything else, which then goes through strictUnmarshal.
func quickQuantity(b []byte) (qty int64, ok bool) {
	i := 0
	ws := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
	}
	lit := func(s string) bool {
		if len(b)-i >= len(s) && string(b[i:i+len(s)]) == s {
			i += len(s)
			return true
		}
		return false
	}
	ws()
	if i == len(b) {
		return 1, len(b) == 0 // only whitespace is not a JSON object: strictUnmarshal says so
	}
	if !lit("{") {
		return 0, false
	}
	ws()
	if lit("}") {
		ws()
		return 1, i == len(b)
	}
	if !lit(`"quantity"`) {
		return 0, false
	}
	ws()
	if !lit(":") {
		return 0, false
	}
	ws()
	start := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		qty = qty*10 + int64(b[i]-'0')
		i++
	}
	if n := i - start; n == 0 || n > 10 || (b[start] == '0' && n > 1) {
		return 0, false
	}
	ws()
	if !lit("}") {
		return 0, false
	}
	ws()
	return qty, i == len(b)
}

// setRateLimitHeaders writes the contract's rate-limit headers for one decision: the
// RateLimit-Limit/-Remaining/-Reset trio, the IETF draft's structured RateLimit-Policy and
// RateLimit fields, and Retry-After (whole seconds, at least 1) on a refusal.
func setRateLimitHeaders(c *gin.Context, name string, p limits.Policy, d limits.Decision) {
	// Canonical keys assigned directly: this runs on every purchase, and Header.Set would
	// canonicalise (allocate) each name again. What depends on the policy alone is built once
	// per policy; the values share one array.
	h := c.Writer.Header()
	fixed := rateLimitFixedOf(name, p, d.Limit)
	reset, remaining := strconv.Itoa(ceilSeconds(d.Reset)), strconv.Itoa(d.Remaining)
	v := make([]string, 6)
	v[0], v[1], v[2], v[3] = fixed.limit, remaining, reset, fixed.policy
	v[4] = fixed.name + ";r=" + remaining + ";t=" + reset
	h["Ratelimit-Limit"] = v[0:1:1]
	h["Ratelimit-Remaining"] = v[1:2:2]
	h["Ratelimit-Reset"] = v[2:3:3]
	h["Ratelimit-Policy"] = v[3:4:4]
	h["Ratelimit"] = v[4:5:5]
	if !d.Allowed {
		v[5] = strconv.Itoa(max(1, ceilSeconds(d.RetryAfter)))
		h["Retry-After"] = v[5:6:6]
	}
}

// rateLimitFixed is what the rate-limit headers of one policy always say.
type rateLimitFixed struct {
	limit  string // RateLimit-Limit
	policy string // RateLimit-Policy
	name   string // the quoted policy name that starts the RateLimit field
}

type rateLimitKey struct {
	name  string
	p     limits.Policy
	limit int
}

var rateLimitFixeds metricChildren[rateLimitKey, rateLimitFixed]

func rateLimitFixedOf(name string, p limits.Policy, limit int) rateLimitFixed {
	return rateLimitFixeds.get(rateLimitKey{name, p, limit}, func(k rateLimitKey) rateLimitFixed {
		l := strconv.Itoa(k.limit)
		window := strconv.Itoa(ceilSeconds(k.p.Period * time.Duration(k.limit) / time.Duration(max(k.p.Rate, 1))))
		return rateLimitFixed{limit: l, policy: strconv.Quote(k.name) + ";q=" + l + ";w=" + window, name: strconv.Quote(k.name)}
	})
}

func ceilSeconds(d time.Duration) int { return int(math.Ceil(d.Seconds())) }
