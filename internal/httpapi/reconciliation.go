package httpapi

import "github.com/gin-gonic/gin"

// The latest reconciliation report (issue 8 replaces this stub).
func (s *Server) reconciliationReport(c *gin.Context) { notYet(c) }
