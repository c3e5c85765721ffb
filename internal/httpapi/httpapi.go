package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/inventory"
	"github.com/flashsale/flashsale/internal/jsonx"
	"github.com/flashsale/flashsale/internal/limits"
	"github.com/flashsale/flashsale/internal/orders"
	"github.com/flashsale/flashsale/internal/payment"
	"github.com/flashsale/flashsale/internal/queue"
	"github.com/flashsale/flashsale/internal/ranking"
)

// apiError is a contract error: an HTTP status and a code.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string { return e.Message }

func errInvalid(msg string) *apiError {
	return &apiError{http.StatusBadRequest, "invalid_request", msg}
}

var (
	errUnauthorized  = &apiError{http.StatusUnauthorized, "unauthorized", "a valid bearer token is required"}
	errForbidden     = &apiError{http.StatusForbidden, "forbidden", "this route needs the admin token"}
	errTooLarge      = &apiError{http.StatusRequestEntityTooLarge, "too_large", "request body is too large"}
	errNoRoute       = &apiError{http.StatusNotFound, "not_found", "no such route"}
	errBadItemID     = &apiError{http.StatusBadRequest, "invalid_request", "item id must match [A-Za-z0-9_-]{1,64}"}
	errUnavailable   = &apiError{http.StatusServiceUnavailable, "unavailable", "a backing service is unavailable; nothing was changed, try again"}
	errUnknown       = &apiError{http.StatusServiceUnavailable, "unavailable", "a backing service did not answer in time; the outcome is unknown: retry with the same Idempotency-Key, or look in GET /api/orders"}
	errNotReady      = &apiError{http.StatusServiceUnavailable, "unavailable", "not ready"}
	errRestoreNeeded = &apiError{http.StatusServiceUnavailable, "unavailable", "restore needed: Redis lost its data and awaits `reconciler restore --all`; nothing was changed, try again later"}
	errShuttingDown  = &apiError{http.StatusServiceUnavailable, "unavailable", "the server is shutting down; nothing was changed, try again"}
	errNoReports     = &apiError{http.StatusServiceUnavailable, "unavailable", "reconciliation reports are not configured"}
	errNoRecord      = &apiError{http.StatusServiceUnavailable, "unavailable", "the reconciliation record (Postgres) is unreachable"}
	errNoReplicas    = &apiError{http.StatusServiceUnavailable, "unavailable", "a Redis replica that must hold the change is not connected; nothing was changed, try again"}
	errNoPrimary     = &apiError{http.StatusServiceUnavailable, "unavailable", "the Redis primary is not confirmed by a majority of the Sentinels; nothing was changed, try again"}
	errNotConfirmed  = &apiError{http.StatusServiceUnavailable, "unavailable", "the Redis replicas did not confirm the change in time; the outcome is unknown: retry with the same Idempotency-Key, or look in GET /api/orders"}
	errInternal      = &apiError{http.StatusInternalServerError, "internal", "an internal error occurred (a bug, logged); the outcome is unknown: retry with the same Idempotency-Key, or look in GET /api/orders"}
)

// sentinels is the one table from domain errors to the contract's status and code; the
// message is the error's own from the sentinel's words on (clientMessage). sold_out comes first: it is the answer a sale gives most.
var sentinels = []struct {
	err    error
	status int
	code   string
}{
	{inventory.ErrSoldOut, http.StatusConflict, "sold_out"},
	{inventory.ErrInvalid, http.StatusBadRequest, "invalid_request"},
	{ranking.ErrInvalid, http.StatusBadRequest, "invalid_request"},
	{inventory.ErrNotFound, http.StatusNotFound, "not_found"},
	{orders.ErrNotFound, http.StatusNotFound, "not_found"},
	{inventory.ErrLimitExceeded, http.StatusConflict, "limit_exceeded"},
	{inventory.ErrSaleNotStarted, http.StatusConflict, "sale_not_started"},
	{inventory.ErrSaleEnded, http.StatusConflict, "sale_ended"},
	{inventory.ErrInvalidState, http.StatusConflict, "invalid_state"},
	{orders.ErrInvalidState, http.StatusConflict, "invalid_state"},
	{orders.ErrExpired, http.StatusConflict, "order_expired"},
	{orders.ErrPaymentProcessing, http.StatusConflict, "payment_processing"},
	{ranking.ErrNotABuyer, http.StatusConflict, "not_a_buyer"},
	{limits.ErrRateLimited, http.StatusTooManyRequests, "rate_limited"},
	{inventory.ErrQueueRequired, http.StatusForbidden, "queue_required"},
	{queue.ErrNoQueue, http.StatusConflict, "no_queue"},
	{queue.ErrNotJoined, http.StatusNotFound, "not_found"},
	{inventory.ErrNotAdmitted, http.StatusServiceUnavailable, "unavailable"},
	{inventory.ErrRestoring, http.StatusServiceUnavailable, "unavailable"},
	{payment.ErrBadSignature, http.StatusBadRequest, "invalid_request"},
	{payment.ErrNoProvider, http.StatusConflict, "invalid_state"},
}

// fail answers err as a contract error: an *apiError as it is, a domain sentinel through the
// table, an unknown outcome as such; anything else is logged with context and answered 503
// unavailable without internals.
func fail(c *gin.Context, err error) {
	if pe, ok := err.(*inventory.PurchaseError); ok && pe.Err == inventory.ErrSoldOut {
		// The answer a sale gives most: its body's head is encoded once (writeSoldOut).
		c.Errors = append(c.Errors, codeError("sold_out"))
		writeSoldOut(c, pe.Error())
		return
	}
	var ae *apiError
	if errors.As(err, &ae) {
		abort(c, ae.Status, ae.Code, ae.Message)
		return
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			abort(c, s.status, s.code, clientMessage(err, s.err))
			return
		}
	}
	// A replica stalled or gone: expected during a failover, counted by the purchase-outcome
	// metric, not logged per request.
	if errors.Is(err, exactlyonce.ErrTooFewReplicas) {
		fail(c, errNoReplicas)
		return
	}
	if errors.Is(err, exactlyonce.ErrPrimaryUnconfirmed) {
		fail(c, errNoPrimary)
		return
	}
	if errors.Is(err, exactlyonce.ErrNotReplicated) {
		fail(c, errNotConfirmed)
		return
	}
	if errors.Is(err, context.Canceled) && c.Request.Context().Err() != nil {
		c.Abort() // the client went away
		return
	}
	slog.Error("request failed", "request_id", requestIDOf(c), "method", c.Request.Method, "route", c.FullPath(), "err", err)
	if errors.Is(err, exactlyonce.ErrOutcomeUnknown) {
		fail(c, errUnknown)
		return
	}
	fail(c, errUnavailable)
}

// clientMessage is err's message from sentinel's own words on: a domain package wraps its
// sentinels with the operation ("orders: cancel a.7: order is not reserved (it is paid)"),
// which names our code, not the client's request; what follows the sentinel (a field, a
// range, a state) stays.
func clientMessage(err, sentinel error) string {
	msg := err.Error()
	if i := strings.Index(msg, sentinel.Error()); i > 0 {
		return msg[i:]
	}
	return msg
}

func abort(c *gin.Context, status int, code, msg string) {
	c.Errors = append(c.Errors, codeError(code)) // for the purchase-outcome metric (errorCodeOf)
	writeError(c, status, code, msg)             // {"error":{"code","message"}} without reflection
}

// Hand-written JSON for the hot replies (an order, an error, the catalogue in catalogue.go): the
// bytes are exactly what encoding/json writes for the same values (httpapi_test.go holds them to
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

// readBody reads at most limit bytes of the request body; more is errTooLarge.
func readBody(c *gin.Context, limit int64) ([]byte, error) {
	if c.Request.ContentLength > limit {
		return nil, errTooLarge
	}
	b, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, errTooLarge
	}
	if err != nil {
		return nil, errInvalid("could not read the request body")
	}
	return b, nil
}

// decodeJSON strictly decodes one JSON object: unknown fields, trailing data and wrong
// types are 400 invalid_request.
func decodeJSON(c *gin.Context, limit int64, v any) error {
	b, err := readBody(c, limit)
	if err != nil {
		return err
	}
	return strictUnmarshal(b, v)
}

func strictUnmarshal(b []byte, v any) error {
	// JSON text is UTF-8 (RFC 8259); encoding/json would turn a bad byte into U+FFFD and save
	// a name other than the one sent.
	if !utf8.Valid(b) {
		return errInvalid("malformed JSON: the body is not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errInvalid("empty body: send a JSON object")
		}
		return errInvalid(jsonMessage(err, "expected an object: the body must be a JSON object"))
	}
	// Only JSON whitespace may follow the value. (Decoder.More is no test for that: it reports
	// false before a stray '}' or ']', so `{"quantity":2}}` would pass as valid.)
	for _, c := range b[dec.InputOffset():] {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return errInvalid("malformed JSON: trailing data after the object")
		}
	}
	// encoding/json matched names case-insensitively ({"Quantity":2} filled Quantity); JSON
	// and the contract do not: every name, nested ones too, must be one of v's exactly.
	n := nameCheck{b: b}
	return n.value(jsonNamesOf(reflect.TypeOf(v)))
}

// jsonMessage says what is wrong with JSON that encoding/json refused, in the contract's words:
// the field and what it must be, or where the syntax broke; never a Go type (encoding/json's
// "cannot unmarshal string into Go struct field .quantity of type int64"). whole is the message
// when the value as a whole has the wrong type.
func jsonMessage(err error, whole string) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		if te.Field == "" {
			return whole
		}
		return fmt.Sprintf("%s must be %s", clip(te.Field, 64), jsonKind(te.Type))
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: it ends too soon"
	}
	// DisallowUnknownFields' error has no type of its own: `json: unknown field "colour"`.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown field " + clip(name, 70)
	}
	return "malformed JSON"
}

// jsonKind names what JSON a Go type takes, as the contract would say it.
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "another kind of value"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer (in range)"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "another kind of value"
}

// jsonNames are the exact member names a struct type accepts; each maps to the names of its
// own value when that is a struct too (nil for any other value, whose names are not checked).
type jsonNames map[string]jsonNames

var jsonNamesCache sync.Map // reflect.Type -> jsonNames

// jsonNamesOf reads t's json tags (through pointers), once per type; nil if t is no struct.
// (No embedded structs or recursive types: the request bodies have neither.)
func jsonNamesOf(t reflect.Type) jsonNames {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	if n, ok := jsonNamesCache.Load(t); ok {
		return n.(jsonNames)
	}
	names := jsonNames{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = jsonNamesOf(f.Type)
	}
	jsonNamesCache.Store(t, names)
	return names
}

// nameCheck walks JSON that encoding/json has just accepted, so it checks names, not syntax.
type nameCheck struct {
	b []byte
	i int
}

// value moves past the value at i, checking the names of an object against names (none when
// names is nil).
func (s *nameCheck) value(names jsonNames) error {
	s.space()
	switch s.b[s.i] {
	case '{':
		s.i++
		var short [8][]byte
		seen := memberNames{list: short[:0]}
		for {
			s.space()
			switch s.b[s.i] {
			case '}':
				s.i++
				return nil
			case ',':
				s.i++
				continue
			}
			start := s.i
			raw, escaped := s.str()
			name := raw // the name itself: raw with its escapes read
			if escaped {
				var n string
				_ = json.Unmarshal(s.b[start:s.i], &n) // valid: the decoder has read it
				name = []byte(n)
			}
			// encoding/json keeps the last of two equal names; a proxy or log reading the first
			// would see another request than the one we act on.
			if !seen.add(name) {
				return errInvalid(fmt.Sprintf("malformed JSON: duplicate field %q", clip(string(name), 64)))
			}
			var inner jsonNames
			if names != nil {
				var ok bool
				if inner, ok = names[string(name)]; !ok { // a map index of a converted []byte does not copy
					return errInvalid(fmt.Sprintf("malformed JSON: unknown field %q (names are case-sensitive)", clip(string(raw), 64)))
				}
			}
			s.space()
			s.i++ // ':'
			if err := s.value(inner); err != nil {
				return err
			}
		}
	case '[':
		s.i++
		for {
			s.space()
			switch s.b[s.i] {
			case ']':
				s.i++
				return nil
			case ',':
				s.i++
			default:
				if err := s.value(nil); err != nil {
					return err
				}
			}
		}
	case '"':
		s.str()
	default: // a number, true, false or null
		for s.i < len(s.b) && !strings.ContainsRune(",}] \t\n\r", rune(s.b[s.i])) {
			s.i++
		}
	}
	return nil
}

// memberNames are the names one object has shown so far (slices of the body, or of their
// unescaped copies): a short list, and a set once the object has many (an attributes map may
// have thousands), so a check is never quadratic.
type memberNames struct {
	list [][]byte
	set  map[string]struct{}
}

// add records name and reports whether it is new.
func (m *memberNames) add(name []byte) bool {
	if m.set != nil {
		if _, dup := m.set[string(name)]; dup {
			return false
		}
		m.set[string(name)] = struct{}{}
		return true
	}
	for _, n := range m.list {
		if bytes.Equal(n, name) {
			return false
		}
	}
	m.list = append(m.list, name)
	if len(m.list) > 16 {
		m.set = make(map[string]struct{}, 2*len(m.list))
		for _, n := range m.list {
			m.set[string(n)] = struct{}{}
		}
	}
	return true
}

// str moves past the string at i and returns what is between its quotes, and whether that
// holds an escape.
func (s *nameCheck) str() (raw []byte, escaped bool) {
	s.i++
	start := s.i
	for s.b[s.i] != '"' {
		if s.b[s.i] == '\\' {
			escaped = true
			s.i++
		}
		s.i++
	}
	s.i++
	return s.b[start : s.i-1], escaped
}

func (s *nameCheck) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}
