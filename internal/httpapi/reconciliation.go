package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
)

// reconciliationReport answers the latest ended batch reconciliation run (record.Latest) as
// {"run": {...}}, or {"run": null} before the first; one abandoned by its runner shows with report
// null. Postgres is read only here, so while it is unreachable this route alone answers 503.
func (s *Server) reconciliationReport(c *gin.Context) {
	if s.Reconciliation == nil {
		fail(c, errNoReports)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), 3*time.Second)
	defer cancel()
	run, err := s.Reconciliation(ctx)
	if err != nil {
		slog.Warn("reconciliation report unavailable", "request_id", requestIDOf(c), "err", err)
		fail(c, errNoRecord)
		return
	}
	c.JSON(http.StatusOK, gin.H{"run": run})
}

// reconciliationRuns answers the newest runs, newest first: {"runs": [...]}, each with its
// status and how much drift it found, running ones included. ?limit=1..100 (default 20);
// any other parameter is 400. Postgres unreachable: 503, like the report.
func (s *Server) reconciliationRuns(c *gin.Context) {
	n := 20
	for k, v := range c.Request.URL.Query() {
		if k != "limit" || len(v) != 1 {
			fail(c, errInvalid("the only parameter is limit=1..100"))
			return
		}
		l, err := strconv.Atoi(v[0])
		if err != nil || l < 1 || l > 100 {
			fail(c, errInvalid("limit must be an integer in 1..100"))
			return
		}
		n = l
	}
	if s.ReconcileRuns == nil {
		fail(c, errNoReports)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), 3*time.Second)
	defer cancel()
	runs, err := s.ReconcileRuns(ctx, n)
	if err != nil {
		slog.Warn("reconciliation runs unavailable", "request_id", requestIDOf(c), "err", err)
		fail(c, errNoRecord)
		return
	}
	c.JSON(http.StatusOK, gin.H{"runs": runs})
}
