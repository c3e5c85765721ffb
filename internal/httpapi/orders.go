package httpapi

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/payment"
)

// listOrders answers GET /api/orders: 200 with the caller's orders and their ETag (the
// version of the caller's orders), or 304 with no body when If-None-Match names that ETag, read
// from the version alone.
func (s *Server) listOrders(c *gin.Context) {
	if !s.allowRead(c, userOf(c)) {
		return
	}
	l, err := s.Orders.ListSince(c.Request.Context(), userOf(c), knownVersion(c.GetHeader("If-None-Match")))
	if err != nil {
		fail(c, err)
		return
	}
	c.Header("ETag", `"`+l.Version+`"`)
	if l.Unchanged {
		c.Status(http.StatusNotModified)
		return
	}
	c.JSON(http.StatusOK, gin.H{"orders": l.Orders})
}

// knownVersion reads the orders version an If-None-Match names: one ETag as listOrders wrote
// it ("12"; a weak W/"12" too); "" for none, a list or "*", which are answered in full.
func knownVersion(h string) string {
	h = strings.TrimPrefix(strings.TrimSpace(h), "W/")
	if len(h) < 3 || h[0] != '"' || h[len(h)-1] != '"' {
		return ""
	}
	v := h[1 : len(h)-1]
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return ""
		}
	}
	return v
}

func (s *Server) getOrder(c *gin.Context) {
	if !s.allowRead(c, userOf(c)) {
		return
	}
	o, err := s.Orders.Get(c.Request.Context(), userOf(c), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"order": o})
}

// payOrder answers POST /api/orders/:id/pay: 200 with the paid order; another user's or a
// malformed id is 404, a reservation whose time ran out 409 order_expired, a paid or cancelled
// order 409 invalid_state. With a payment provider only the provider pays orders: 409
// invalid_state.
func (s *Server) payOrder(c *gin.Context) {
	if s.Payments.Enabled() {
		fail(c, errProviderPays)
		return
	}
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

var errProviderPays = &apiError{http.StatusConflict, "invalid_state",
	"this shop takes payment through its payment provider: use POST /api/orders/{id}/checkout"}

var (
	errRefundKey      = errInvalid("Idempotency-Key is required: a retried refund must not ask the provider twice")
	errRefundNotPaid  = &apiError{http.StatusConflict, "invalid_state", "only a paid order with a payment can be refunded (or it was refunded under another Idempotency-Key)"}
	errRefundNoneProv = &apiError{http.StatusConflict, "invalid_state", "this shop settles payment outside: there is no payment to refund"}
)

// refundOrder answers POST /api/admin/orders/:id/refund (optional body {"restock": bool}): 200
// {"order"} refunded in full, the same again for the same Idempotency-Key; 400 without the key,
// 404 for an unknown order, 409 invalid_state unless paid with a payment, 502 payment_refused
// (e.g. a disputed charge), 503 while the provider cannot be reached.
func (s *Server) refundOrder(c *gin.Context) {
	raw, err := readBody(c, maxBody)
	if err != nil {
		fail(c, err)
		return
	}
	var body struct {
		Restock bool `json:"restock"`
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := strictUnmarshal(raw, &body); err != nil {
			fail(c, err)
			return
		}
	}
	key, err := idempotencyKey(c)
	if err != nil {
		fail(c, err)
		return
	}
	if key == "" {
		fail(c, errRefundKey)
		return
	}
	o, err := s.Payments.RefundOrder(c.Request.Context(), c.Param("id"), key, body.Restock)
	if err != nil {
		var refusal *payment.Refusal
		switch {
		case errors.As(err, &refusal):
			slog.Warn("refund: the payment provider refused", "request_id", requestIDOf(c), "order", c.Param("id"), "err", err)
			err = &apiError{http.StatusBadGateway, "payment_refused", "the payment provider refused this refund: " + refusal.Reason}
		case errors.Is(err, payment.ErrUnavailable):
			slog.Warn("refund: payment provider unavailable", "request_id", requestIDOf(c), "err", err)
			err = &apiError{http.StatusServiceUnavailable, "unavailable",
				"the payment provider cannot be reached; retry with the same Idempotency-Key"}
		case errors.Is(err, orders.ErrInvalidState):
			err = errRefundNotPaid
		case errors.Is(err, payment.ErrNoProvider):
			err = errRefundNoneProv
		}
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"order": o})
}
