package httpapi

import (
	_ "embed"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

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

// observe records every request by route pattern (never the raw path, so label values stay
// bounded), status and latency, and purchase outcomes by the contract's words, and writes the
// access log (accesslog.go). It is the one timing middleware (it was two, each reading the
// clock): it runs on every request, so it looks metric children up in lock-free caches
// (metricChildren) instead of hashing label values under the vectors' locks three times per
// request.
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
