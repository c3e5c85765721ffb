package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync/atomic"

	"github.com/gin-gonic/gin"
)

// Request ids: the client's own X-Request-Id when it is 1-64 printable ASCII, else a process
// prefix and a counter (unique across instances and restarts, one atomic add to mint).
var (
	requestIDPrefix = func() string {
		var b [6]byte
		if _, err := rand.Read(b[:]); err != nil {
			panic(fmt.Sprintf("httpapi: no randomness for request ids: %v", err))
		}
		return hex.EncodeToString(b[:]) + "-"
	}()
	requestSeq atomic.Uint64
)

// requestID gives every request an id, answers it in X-Request-Id and keeps it for the error
// body and every log line about the request. Its deferred recover turns a panic (a bug) into
// the contract's error body with the id, logged with the stack, instead of an empty 500.
func (s *Server) requestID(c *gin.Context) {
	id := headerValue(c.Request, "X-Request-Id")
	if !validRequestID(id) {
		var b [32]byte
		id = string(strconv.AppendUint(append(b[:0], requestIDPrefix...), requestSeq.Add(1), 36))
	}
	// The answer's header is where handlers and logs read the id back (requestIDOf).
	h := c.Writer.Header()
	h["X-Request-Id"] = []string{id}
	h["X-Content-Type-Options"] = nosniff
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p) // net/http's way to abort a response: not a bug
			}
			slog.Error("panic", "request_id", id, "method", c.Request.Method, "route", c.FullPath(),
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if !c.Writer.Written() {
				fail(c, errInternal)
			}
		}
	}()
	c.Next()
}

var nosniff = []string{"nosniff"}

// headerValue is r.Header.Get(key) for a key already in canonical form, as net/http stores
// received headers: a map lookup without canonicalising the key again (Header.Get checks and
// copies every byte of it), on the paths every request takes.
func headerValue(r *http.Request, key string) string {
	if v := r.Header[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func validRequestID(id string) bool {
	if len(id) < 1 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// requestIDOf is the request's id ("" outside a request that went through requestID), read
// from the answer's X-Request-Id header that requestID set.
func requestIDOf(c *gin.Context) string {
	if v := c.Writer.Header()["X-Request-Id"]; len(v) > 0 {
		return v[0]
	}
	return ""
}
