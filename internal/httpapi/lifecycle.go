package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// payOrder answers POST /api/orders/:id/pay: 200 with the paid order; another user's or a
// malformed id is 404, a reservation whose time ran out 409 order_expired, a paid or cancelled
// order 409 invalid_state.
func (s *Server) payOrder(c *gin.Context) {
	o, err := s.Orders.Pay(c.Request.Context(), userOf(c), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"order": o})
}

// cancelOrder answers POST /api/orders/:id/cancel: 200 with the cancelled order (its stock is
// back on sale); another user's or a malformed id is 404, any order that is not reserved
// (including one whose time ran out) 409 invalid_state.
func (s *Server) cancelOrder(c *gin.Context) {
	o, err := s.Orders.Cancel(c.Request.Context(), userOf(c), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"order": o})
}
