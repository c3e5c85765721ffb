package httpapi

import "github.com/gin-gonic/gin"

// Pay and cancel (issue 3 replaces these stubs).
func (s *Server) payOrder(c *gin.Context)    { notYet(c) }
func (s *Server) cancelOrder(c *gin.Context) { notYet(c) }
