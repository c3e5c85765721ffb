package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// Metrics and OpenAPI (issue 9 replaces these stubs).
func (s *Server) observe(c *gin.Context) {}
func (s *Server) metrics(c *gin.Context) { notYet(c) }
func (s *Server) openapi(c *gin.Context) { notYet(c) }

func notYet(c *gin.Context) { abort(c, http.StatusServiceUnavailable, "unavailable", "not built yet") }
