package httpapi

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/limits"
)

func (s *Server) purchase(c *gin.Context) {
	body := struct {
		Quantity *int64 `json:"quantity"`
	}{}
	b, err := readBody(c, maxBody)
	if err != nil {
		fail(c, err)
		return
	}
	if len(b) > 0 {
		if err := strictUnmarshal(b, &body); err != nil {
			fail(c, err)
			return
		}
	}
	qty := int64(1)
	if body.Quantity != nil {
		qty = *body.Quantity
	}
	if qty < 1 || qty > 1e9 {
		fail(c, errInvalid("quantity must be at least 1"))
		return
	}
	key, hasKey := c.Request.Header["Idempotency-Key"]
	req := inventory.PurchaseRequest{ItemID: c.Param("id"), UserID: userOf(c), Quantity: qty}
	if hasKey {
		req.IdempotencyKey = key[0]
		if !inventory.ValidIdempotencyKey(req.IdempotencyKey) {
			fail(c, errInvalid("Idempotency-Key must be 1-64 printable ASCII characters"))
			return
		}
	}
	res, err := s.Inventory.Purchase(c.Request.Context(), req)
	if err != nil {
		var pe *inventory.PurchaseError
		if errors.As(err, &pe) && pe.Limit != nil {
			setRateLimitHeaders(c, "purchase", s.Config.LimitPurchase, *pe.Limit)
		}
		fail(c, err)
		return
	}
	if res.Limit != nil {
		setRateLimitHeaders(c, "purchase", s.Config.LimitPurchase, *res.Limit)
	}
	status := http.StatusCreated
	if res.Replayed {
		status = http.StatusOK
	}
	c.JSON(status, gin.H{"order": res.Order})
}

func (s *Server) listOrders(c *gin.Context) {
	ids, err := s.Inventory.IDs(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	list, err := s.Orders.List(c.Request.Context(), userOf(c), ids)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"orders": list})
}

func (s *Server) getOrder(c *gin.Context) {
	o, err := s.Orders.Get(c.Request.Context(), userOf(c), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"order": o})
}

// setRateLimitHeaders writes the contract's rate-limit headers for one decision: the
// RateLimit-Limit/-Remaining/-Reset trio, the IETF draft's structured RateLimit-Policy and
// RateLimit fields, and Retry-After (whole seconds, at least 1) on a refusal.
func setRateLimitHeaders(c *gin.Context, name string, p config.Limit, d limits.Decision) {
	h := c.Writer.Header()
	reset := ceilSeconds(d.Reset)
	h.Set("RateLimit-Limit", strconv.Itoa(d.Limit))
	h.Set("RateLimit-Remaining", strconv.Itoa(d.Remaining))
	h.Set("RateLimit-Reset", strconv.Itoa(reset))
	h.Set("RateLimit-Policy", fmt.Sprintf("%q;q=%d;w=%d", name, d.Limit, ceilSeconds(p.Period*time.Duration(d.Limit)/time.Duration(max(p.Rate, 1)))))
	h.Set("RateLimit", fmt.Sprintf("%q;r=%d;t=%d", name, d.Remaining, reset))
	if !d.Allowed {
		h.Set("Retry-After", strconv.Itoa(max(1, ceilSeconds(d.RetryAfter))))
	}
}

func ceilSeconds(d time.Duration) int { return int(math.Ceil(d.Seconds())) }
