package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/flashsale/flashsale/internal/exactlyonce"
	"github.com/flashsale/flashsale/internal/inventory"
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
