package httpapi

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/jsonx"
	"github.com/flashsale/flashsale/internal/orders"
)

// Hand-written JSON for the hot replies (an order, an error, the catalogue in catalogue.go): the
// bytes are exactly what encoding/json writes for the same values (replies_test.go holds them to
// it), without per-request reflection or maps. Everything else uses c.JSON.

const jsonContentType = "application/json; charset=utf-8"

var jsonContentTypeValue = []string{jsonContentType}

var replyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// writeJSON sends body as the reply with the given status. The length goes in the header so
// that net/http does not chunk a body over its 2 KB buffer (a catalogue page): no chunk
// framing and no separate write of the closing chunk.
func writeJSON(c *gin.Context, status int, body []byte) {
	h := c.Writer.Header()
	h["Content-Type"] = jsonContentTypeValue
	if len(body) > 2048 {
		h["Content-Length"] = []string{strconv.Itoa(len(body))}
	}
	c.Writer.WriteHeader(status)
	_, _ = c.Writer.Write(body)
}

// writeSized is writeJSON for a body whose Content-Length header value (length) was made with
// it: a cached catalogue list, answered many times.
func writeSized(c *gin.Context, status int, body []byte, length []string) {
	h := c.Writer.Header()
	h["Content-Type"] = jsonContentTypeValue
	h["Content-Length"] = length
	c.Writer.WriteHeader(status)
	_, _ = c.Writer.Write(body)
}

// writeError answers {"error":{"code","message"}} and aborts the chain.
func writeError(c *gin.Context, status int, code, msg string) {
	bp := replyBufs.Get().(*[]byte)
	finishError(c, status, appendErrorHead((*bp)[:0], code, msg), bp)
}

// appendErrorHead appends an error body up to its message: {"error":{"code":..,"message":..
func appendErrorHead(b []byte, code, msg string) []byte {
	b = append(b, `{"error":{"code":`...)
	b = jsonx.AppendString(b, code)
	b = append(b, `,"message":`...)
	return jsonx.AppendString(b, msg)
}

// soldOutHead is the sold_out answer's body up to its request id, encoded once per message (the
// purchase error's, which is always the same): the answer a sale gives most.
var soldOutHead atomic.Pointer[errorHead]

type errorHead struct {
	msg  string
	head []byte
}

// writeSoldOut is writeError(c, 409, "sold_out", msg).
func writeSoldOut(c *gin.Context, msg string) {
	h := soldOutHead.Load()
	if h == nil || h.msg != msg {
		h = &errorHead{msg: msg, head: appendErrorHead(nil, "sold_out", msg)}
		soldOutHead.Store(h)
	}
	bp := replyBufs.Get().(*[]byte)
	finishError(c, http.StatusConflict, append((*bp)[:0], h.head...), bp)
}

// finishError appends the request id to an error body's head b, answers it and aborts the
// chain; bp (b's pooled buffer) goes back to the pool.
func finishError(c *gin.Context, status int, b []byte, bp *[]byte) {
	if id := requestIDOf(c); id != "" {
		b = append(b, `,"request_id":`...)
		b = jsonx.AppendString(b, id)
	}
	b = append(b, "}}"...)
	c.Abort()
	writeJSON(c, status, b)
	*bp = b
	replyBufs.Put(bp)
}

// writeOrder answers {"order": Order}.
func writeOrder(c *gin.Context, status int, o orders.Order) {
	bp := replyBufs.Get().(*[]byte)
	b := append((*bp)[:0], `{"order":`...)
	b = appendOrder(b, o)
	b = append(b, '}')
	writeJSON(c, status, b)
	*bp = b
	replyBufs.Put(bp)
}

func appendOrder(b []byte, o orders.Order) []byte {
	b = append(b, `{"id":`...)
	b = jsonx.AppendString(b, o.ID)
	b = append(b, `,"item_id":`...)
	b = jsonx.AppendString(b, o.ItemID)
	b = append(b, `,"user_id":`...)
	b = jsonx.AppendString(b, o.UserID)
	b = append(b, `,"quantity":`...)
	b = strconv.AppendInt(b, o.Quantity, 10)
	b = append(b, `,"price_cents":`...)
	b = strconv.AppendInt(b, o.PriceCents, 10)
	b = append(b, `,"status":`...)
	b = jsonx.AppendString(b, string(o.Status))
	b = append(b, `,"created_at":`...)
	b = jsonx.AppendTime(b, o.CreatedAt)
	b = append(b, `,"expires_at":`...)
	b = jsonx.AppendTime(b, o.ExpiresAt)
	b = append(b, `,"payment_id":`...)
	b = appendNullable(b, o.PaymentID)
	b = append(b, `,"payment_status":`...)
	b = appendNullable(b, o.PaymentStatus)
	return append(b, '}')
}

// appendNullable appends s as a JSON string, or null when it is empty.
func appendNullable(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return jsonx.AppendString(b, s)
}
