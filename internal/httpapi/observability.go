package httpapi

import (
	_ "embed"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/metrics"
)

// openapiDoc is the contract (../shared/spec/api.md) as an OpenAPI 3 document; a test keeps it
// and the registered routes in step.
//
//go:embed openapi.json
var openapiDoc []byte

// errorCodeKey is where abort leaves the contract's error code for observe.
const errorCodeKey = "flashsale.error_code"

const purchaseRoute = "/api/items/:id/purchase"

// observe records every request by route pattern (never the raw path, so label values stay
// bounded), status and latency, and purchase outcomes by the contract's words.
func (s *Server) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	route, method := c.FullPath(), c.Request.Method
	if route == "" {
		// Unknown paths and methods come from clients: don't let them mint label values.
		route, method = "unmatched", "other"
	}
	metrics.HTTPRequests.WithLabelValues(method, route, strconv.Itoa(c.Writer.Status())).Inc()
	metrics.HTTPDuration.WithLabelValues(method, route).Observe(time.Since(start).Seconds())
	if route == purchaseRoute {
		metrics.Purchases.WithLabelValues(purchaseOutcome(c)).Inc()
	}
}

func purchaseOutcome(c *gin.Context) string {
	if code := c.GetString(errorCodeKey); code != "" {
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

func notYet(c *gin.Context) { abort(c, http.StatusServiceUnavailable, "unavailable", "not built yet") }
