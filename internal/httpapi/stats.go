package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/stats"
)

// adminStats is GET /api/admin/stats?seconds=N: the sale monitor's series of the last N
// seconds (default 300, at most stats.MaxSeconds) summed over every api instance.
func (s *Server) adminStats(c *gin.Context) {
	n := 300
	if v := c.Query("seconds"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > stats.MaxSeconds {
			fail(c, errInvalid("seconds must be an integer from 1 to "+strconv.Itoa(stats.MaxSeconds)))
			return
		}
	}
	if s.Redis == nil {
		fail(c, errUnavailable)
		return
	}
	series, err := stats.Read(c.Request.Context(), s.Redis, s.Options.StatsKeys, n, time.Now())
	if err != nil {
		fail(c, err)
		return
	}
	if s.DataLost != nil {
		if err := s.DataLost(); err != nil {
			series.RedisDataLost = err.Error()
		}
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, series)
}
