package paysim

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// apiError is Stripe's error object: the body of every non-2xx reply (inside {"error": …}),
// and a payment intent's last_payment_error.
type apiError struct {
	Type          string      `json:"type"`
	Code          string      `json:"code"`
	DeclineCode   string      `json:"decline_code,omitempty"`
	Message       string      `json:"message"`
	Param         string      `json:"param,omitempty"`
	PaymentIntent *intentJSON `json:"payment_intent,omitempty"`
	PaymentMethod *pmJSON     `json:"payment_method,omitempty"`
	status        int
}

func (e *apiError) Error() string { return e.Type + "/" + e.Code + ": " + e.Message }

// Stripe's error types.
const (
	invalidRequest   = "invalid_request_error"
	cardError        = "card_error"
	apiErrorType     = "api_error"
	idempotencyError = "idempotency_error"
)

func badRequest(code, param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, Type: invalidRequest, Code: code, Param: param, Message: fmt.Sprintf(format, args...)}
}

func noSuch(kind, param, id string) *apiError {
	return &apiError{status: http.StatusNotFound, Type: invalidRequest, Code: "resource_missing", Param: param,
		Message: fmt.Sprintf("No such %s: '%s'", kind, id)}
}

// noSuchParam: a parameter names an object that does not exist (400, where a path's unknown
// object is 404, as at Stripe).
func noSuchParam(kind, param, id string) *apiError {
	e := noSuch(kind, param, id)
	e.status = http.StatusBadRequest
	return e
}

// caller is who sent an API request: a secret key, or nobody (routes that a client_secret
// authorizes, as Stripe's publishable-key routes).
type caller struct {
	key  string
	form map[string][]string
}

func (c *caller) get(name string) string {
	if v := c.form[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// apiHandler makes a change or reads, and answers a status and a JSON body (an *apiError for
// a non-2xx status).
type apiHandler func(r *http.Request, c *caller) (int, any)

// access says who may call a route.
type access int

const (
	secretKeyOnly     access = iota
	keyOrClientSecret        // the handler checks the client_secret when no key was given
)

const maxFormBytes = 256 << 10

// api wraps a handler with Stripe's conventions: form-encoded parameters (body or query),
// bearer-key auth, Idempotency-Key replay of the first reply, JSON answers.
func (s *Server) api(h apiHandler, acc access) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Request-Id", "req_"+randomID(14))
		w.Header().Set("Stripe-Version", s.cfg.EventAPIVersion)
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			writeReply(w, http.StatusBadRequest, badRequest("parameter_invalid", "", "Invalid request body: %v", err))
			return
		}
		key, keyErr := s.apiKey(r)
		if keyErr != nil || (key == "" && acc == secretKeyOnly) {
			msg := "You did not provide an API key. Provide your secret key in the Authorization header, as 'Bearer sk_test_…'."
			if keyErr != nil {
				msg = keyErr.Error()
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="Stripe"`)
			writeReply(w, http.StatusUnauthorized, &apiError{Type: invalidRequest, Code: "api_key_invalid", Message: msg})
			return
		}
		c := &caller{key: key, form: r.Form}
		ikey := r.Header.Get("Idempotency-Key")
		if r.Method != http.MethodPost || ikey == "" {
			status, body := h(r, c)
			writeReply(w, status, body)
			return
		}
		if len(ikey) > 255 {
			writeReply(w, http.StatusBadRequest, badRequest("idempotency_key_too_long", "", "Idempotency-Key is longer than 255 characters."))
			return
		}
		w.Header().Set("Idempotency-Key", ikey)
		scope := key
		if scope == "" {
			scope = "client_secret:" + c.get("client_secret")
		}
		fingerprint := r.Method + " " + r.URL.Path + "?" + r.Form.Encode()
		e, first := s.idem.begin(scope+"\x00"+ikey, fingerprint)
		if !first {
			if e.fingerprint != fingerprint {
				writeReply(w, http.StatusBadRequest, &apiError{Type: idempotencyError, Code: "idempotency_key_in_use",
					Message: "Keys for idempotent requests can only be used with the same parameters they were first used with."})
				return
			}
			select {
			case <-e.done:
			case <-r.Context().Done():
				return
			}
			w.Header().Set("Idempotent-Replayed", "true")
			w.Header().Set("Original-Request", e.requestID)
			writeRaw(w, e.status, e.body)
			return
		}
		finished := false
		defer func() { // a handler that panics must not leave the key's later requests waiting
			if !finished {
				s.idem.finish(e, w.Header().Get("Request-Id"), http.StatusInternalServerError, marshalReply(errInternal))
			}
		}()
		status, body := h(r, c)
		raw := marshalReply(body)
		s.idem.finish(e, w.Header().Get("Request-Id"), status, raw)
		finished = true
		writeRaw(w, status, raw)
	})
}

// apiKey is the secret key of the request ("" when none was sent), or an error for a key this
// simulator does not accept. Stripe takes the key as a bearer token or as the basic-auth user.
func (s *Server) apiKey(r *http.Request) (string, error) {
	key := ""
	if user, _, ok := r.BasicAuth(); ok {
		key = user
	} else if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "", errors.New("invalid Authorization header: use 'Bearer <secret key>'")
		}
		key = strings.TrimSpace(tok)
	}
	if key == "" {
		return "", nil
	}
	if len(s.cfg.APIKeys) == 0 {
		if strings.HasPrefix(key, "sk_test_") && len(key) > len("sk_test_") {
			return key, nil
		}
	} else if slices.ContainsFunc(s.cfg.APIKeys, func(k string) bool { return subtle.ConstantTimeCompare([]byte(k), []byte(key)) == 1 }) {
		return key, nil
	}
	return "", fmt.Errorf("invalid API key provided: %s", maskKey(key))
}

func maskKey(k string) string {
	if len(k) <= 12 {
		return strings.Repeat("*", len(k))
	}
	return k[:8] + strings.Repeat("*", len(k)-12) + k[len(k)-4:]
}

func marshalReply(body any) []byte {
	if e, ok := body.(*apiError); ok {
		body = map[string]*apiError{"error": e}
	}
	raw, err := json.Marshal(body)
	if err != nil { // only our own types are marshalled: a bug
		panic(fmt.Sprintf("paysim: marshal reply: %v", err))
	}
	return append(raw, '\n')
}

func writeReply(w http.ResponseWriter, status int, body any) {
	if status == 0 {
		if e, ok := body.(*apiError); ok {
			status = e.status
		}
	}
	writeRaw(w, status, marshalReply(body))
}

func writeRaw(w http.ResponseWriter, status int, raw []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache, no-store")
	if status >= 500 {
		// What Stripe says with a 500 its idempotency layer would replay: retrying is useless.
		w.Header().Set("Stripe-Should-Retry", "false")
	}
	w.WriteHeader(status)
	_, _ = w.Write(raw) // a client that went away: nothing to do
}

// idempotency keeps the first reply of every (caller, Idempotency-Key) for a while. A second
// request with the key waits for the first to finish and gets its reply byte for byte, whatever
// its status; one with other parameters is refused, as at Stripe.
type idempotency struct {
	ttl       time.Duration
	mu        sync.Mutex
	m         map[string]*idemEntry
	lastPrune time.Time
}

type idemEntry struct {
	done        chan struct{}
	fingerprint string
	requestID   string
	status      int
	body        []byte
	at          time.Time
}

func newIdempotency(ttl time.Duration) *idempotency {
	return &idempotency{ttl: ttl, m: map[string]*idemEntry{}, lastPrune: time.Now()}
}

// begin returns the entry of key, and whether this request is the first with it (it must then
// call finish).
func (c *idempotency) begin(key, fingerprint string) (*idemEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if now.Sub(c.lastPrune) > c.ttl/8 {
		for k, e := range c.m {
			if !e.at.IsZero() && now.Sub(e.at) > c.ttl {
				delete(c.m, k)
			}
		}
		c.lastPrune = now
	}
	if e, ok := c.m[key]; ok && (e.at.IsZero() || now.Sub(e.at) <= c.ttl) {
		return e, false
	}
	e := &idemEntry{done: make(chan struct{}), fingerprint: fingerprint}
	c.m[key] = e
	return e, true
}

func (c *idempotency) finish(e *idemEntry, requestID string, status int, body []byte) {
	c.mu.Lock()
	e.requestID, e.status, e.body, e.at = requestID, status, body, time.Now()
	c.mu.Unlock()
	close(e.done)
}
