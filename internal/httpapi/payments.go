package httpapi

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/payment"
)

var errProviderDown = &apiError{http.StatusServiceUnavailable, "unavailable",
	"the payment provider cannot be reached; nothing was changed, try again"}

// needProvider refuses checkout before the rate limit when the shop settles outside: asking
// costs the shopper none of their pay allowance (the page then pays with POST /pay).
func (s *Server) needProvider(c *gin.Context) {
	if !s.Payments.Enabled() {
		fail(c, payment.ErrNoProvider)
	}
}

// checkout answers POST /api/orders/:id/checkout: 200 {"order","payment"} with the order's attempt
// in force (a Checkout Session, opened when none is); 404 for another's or a malformed id; 409
// invalid_state (not reserved, or provider none) or order_expired; 502 payment_refused with its
// reason; 503 when the provider is unreachable or answers 5xx (nothing changed).
func (s *Server) checkout(c *gin.Context) {
	o, p, err := s.Payments.Checkout(c.Request.Context(), userOf(c), c.Param("id"), s.shopURL(c))
	if err != nil {
		var refusal *payment.Refusal
		switch {
		case errors.As(err, &refusal):
			slog.Warn("checkout: the payment provider refused", "request_id", requestIDOf(c), "err", err)
			err = &apiError{http.StatusBadGateway, "payment_refused", "the payment provider refused this payment: " + refusal.Reason}
		case errors.Is(err, payment.ErrUnavailable):
			slog.Warn("checkout: payment provider unavailable", "request_id", requestIDOf(c), "err", err)
			err = errProviderDown
		}
		fail(c, err)
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, gin.H{"order": o, "payment": p})
}

// shopURL is the shop page Checkout returns the shopper to: FLASHSALE_PUBLIC_URL, or this
// request's own host (a shopper can only point their own return elsewhere).
func (s *Server) shopURL(c *gin.Context) string {
	if u := s.Options.PublicURL; u != "" {
		return strings.TrimRight(u, "/") + "/"
	}
	scheme := "http"
	if c.Request.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + c.Request.Host + "/"
}

// paymentWebhook answers POST /api/payments/webhook: 400 invalid_request for a delivery
// without a valid signature (nothing changed), 200 for every verified event, 503 while it
// could not be applied (the provider delivers it again).
func (s *Server) paymentWebhook(c *gin.Context) {
	raw, err := readBody(c, maxBody)
	if err != nil {
		fail(c, err)
		return
	}
	if err := s.Payments.HandleWebhook(c.Request.Context(), raw, c.GetHeader("Stripe-Signature")); err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"received": true})
}
