package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/jsonx"
	"github.com/flashsale/flashsale/internal/queue"
)

// The waiting room's routes: they translate between HTTP and internal/queue.

var errNoQueueStore = &apiError{http.StatusConflict, "no_queue", "this api has no waiting rooms"}

func (s *Server) joinQueue(c *gin.Context) {
	if s.Queue == nil {
		fail(c, errNoQueueStore)
		return
	}
	tk, err := s.Queue.Join(c.Request.Context(), c.Param("id"), userOf(c))
	if err != nil {
		fail(c, err)
		return
	}
	writeTicket(c, tk)
}

// pollQueue answers from memory when the Queue-Ticket header carries a waiting ticket's token.
// Like the purchase, it takes the user as an argument (Auth.shopper): no Gin context map. A
// poll that must read Redis counts against the user's read limit; one from memory does not.
func (s *Server) pollQueue(c *gin.Context, user string) {
	if s.Queue == nil {
		fail(c, errNoQueueStore)
		return
	}
	var token string
	if h := c.Request.Header["Queue-Ticket"]; len(h) > 0 {
		token = h[0]
	}
	if tk, ok := s.Queue.PollMemory(c.Param("id"), user, token); ok {
		writeTicket(c, tk)
		return
	}
	if !s.allowRead(c, user) {
		return
	}
	tk, err := s.Queue.Poll(c.Request.Context(), c.Param("id"), user, "")
	if err != nil {
		fail(c, err)
		return
	}
	writeTicket(c, tk)
}

func (s *Server) queueStats(c *gin.Context) {
	if s.Queue == nil {
		fail(c, errNoQueueStore)
		return
	}
	st, err := s.Queue.Stats(c.Request.Context(), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"item_id": c.Param("id"), "line": st})
}

// writeTicket answers {"ticket": Ticket} by hand (a poll is the hot path of a waiting room):
// the same bytes encoding/json would write.
func writeTicket(c *gin.Context, t queue.Ticket) {
	bp := replyBufs.Get().(*[]byte)
	b := append((*bp)[:0], `{"ticket":{"item_id":`...)
	b = jsonx.AppendString(b, t.ItemID)
	b = append(b, `,"user_id":`...)
	b = jsonx.AppendString(b, t.UserID)
	b = append(b, `,"state":`...)
	b = jsonx.AppendString(b, t.State)
	b = append(b, `,"position":`...)
	b = appendOptInt(b, t.Position, t.Position > 0)
	b = append(b, `,"eta_seconds":`...)
	b = appendOptInt(b, t.ETASeconds, t.ETASeconds >= 0)
	b = append(b, `,"poll_after_ms":`...)
	b = appendOptInt(b, t.PollAfterMS, t.PollAfterMS >= 0)
	b = append(b, `,"token":`...)
	b = jsonx.AppendString(b, t.Token)
	b = append(b, `,"pass":`...)
	if t.Pass == "" {
		b = append(b, "null"...)
	} else {
		b = jsonx.AppendString(b, t.Pass)
	}
	b = append(b, `,"pass_expires_at":`...)
	if t.PassExpiresAt.IsZero() {
		b = append(b, "null"...)
	} else {
		b = jsonx.AppendTime(b, t.PassExpiresAt.UTC().Truncate(time.Millisecond))
	}
	b = append(b, "}}"...)
	writeJSON(c, http.StatusOK, b)
	*bp = b
	replyBufs.Put(bp)
}

func appendOptInt(b []byte, n int64, ok bool) []byte {
	if !ok {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, n, 10)
}
