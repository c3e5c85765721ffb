package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// reconciliationReport answers the latest batch reconciliation run as stored in Postgres:
// {"run": {...}} with the run's report inside, or {"run": null} before the first run. The
// latest run is the newest that ended (record.Latest): a run in progress is not shown, an
// abandoned one (its runner stopped before finishing; the next run closed it) is, report null.
// Postgres is read only here, so while it is unreachable this route alone answers 503.
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
