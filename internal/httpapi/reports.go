package httpapi

import (
	"context"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/record"
)

var errNoSalesRecord = &apiError{http.StatusServiceUnavailable, "unavailable",
	"the sales record (Postgres) is unreachable; nothing was changed, try again later"}

// salesReport answers the post-sale report from the Postgres record: JSON, or CSV when the
// client accepts text/csv (and not JSON first). ?from, ?to (RFC 3339) select the items whose
// sale window meets [from, to], ?item one item; any other parameter is 400.
func (s *Server) salesReport(c *gin.Context) {
	var f record.SalesFilter
	for k, v := range c.Request.URL.Query() {
		if len(v) != 1 {
			fail(c, errInvalid("parameter "+k+" is given more than once"))
			return
		}
		switch k {
		case "from", "to":
			t, err := time.Parse(time.RFC3339, v[0])
			if err != nil {
				fail(c, errInvalid(k+" must be an RFC 3339 time such as 2026-11-27T10:00:00Z"))
				return
			}
			if k == "from" {
				f.From = &t
			} else {
				f.To = &t
			}
		case "item":
			if !keyspace.ValidID(v[0]) {
				fail(c, errInvalid("item must be an item id: 1-64 of A-Z a-z 0-9 _ -"))
				return
			}
			f.Item = v[0]
		default:
			fail(c, errInvalid("unknown parameter "+k+"; the parameters are from, to and item"))
			return
		}
	}
	if f.From != nil && f.To != nil && f.To.Before(*f.From) {
		fail(c, errInvalid("to is before from"))
		return
	}
	if s.SalesReport == nil {
		fail(c, errNoSalesRecord)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), 30*time.Second)
	defer cancel()
	rep, err := s.SalesReport(ctx, f)
	if err != nil {
		slog.Warn("sales report unavailable", "request_id", requestIDOf(c), "err", err)
		fail(c, errNoSalesRecord)
		return
	}
	if wantsCSV(c.GetHeader("Accept")) {
		c.Header("Content-Type", "text/csv; charset=utf-8")
		c.Header("Content-Disposition", `attachment; filename="sales-report.csv"`)
		c.Status(http.StatusOK)
		if err := rep.WriteCSV(c.Writer); err != nil {
			slog.Warn("sales report: writing CSV", "request_id", requestIDOf(c), "err", err)
		}
		return
	}
	c.JSON(http.StatusOK, rep)
}

// wantsCSV: the Accept header names text/csv before any JSON type (or without one).
func wantsCSV(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || params["q"] == "0" {
			continue
		}
		switch mt {
		case "text/csv":
			return true
		case "application/json", "*/*", "application/*":
			return false
		}
	}
	return false
}

// disputes answers GET /api/admin/payments/disputes: {"disputes": [...]}, the newest 100
// disputed payments (newest first) as the record holds them. No parameters; Postgres
// unreachable: 503.
func (s *Server) disputes(c *gin.Context) {
	if len(c.Request.URL.Query()) > 0 {
		fail(c, errInvalid("this route takes no parameters"))
		return
	}
	if s.Disputes == nil {
		fail(c, errNoRecord)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), 3*time.Second)
	defer cancel()
	list, err := s.Disputes(ctx, 100)
	if err != nil {
		slog.Warn("disputes unavailable", "request_id", requestIDOf(c), "err", err)
		fail(c, errNoRecord)
		return
	}
	c.JSON(http.StatusOK, gin.H{"disputes": list})
}
