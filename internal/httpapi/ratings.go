package httpapi

import "github.com/gin-gonic/gin"

// Ratings and leaderboards (issue 5 replaces these stubs).
func (s *Server) rateItem(c *gin.Context)    { notYet(c) }
func (s *Server) topRated(c *gin.Context)    { notYet(c) }
func (s *Server) bestSellers(c *gin.Context) { notYet(c) }
