package paysim

import (
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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
		e, state := s.idem.begin(scope+"\x00"+ikey, fingerprint)
		switch state {
		case idemInFlight:
			writeReply(w, http.StatusConflict, &apiError{Type: idempotencyError, Code: "idempotency_key_in_use",
				Message: "There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through). Please try again later."})
			return
		case idemDone:
			if e.fingerprint != fingerprint {
				writeReply(w, http.StatusBadRequest, &apiError{Type: idempotencyError, Code: "idempotency_key_in_use",
					Message: "Keys for idempotent requests can only be used with the same parameters they were first used with."})
				return
			}
			w.Header().Set("Idempotent-Replayed", "true")
			w.Header().Set("Original-Request", e.requestID)
			writeRaw(w, e.status, e.body)
			return
		}
		finished := false
		defer func() { // a handler that panics must not leave the key in flight for ever
			if !finished {
				s.idem.finish(e, w.Header().Get("Request-Id"), http.StatusInternalServerError, marshalReply(errInternal))
			}
		}()
		status, body := h(r, c)
		if status == 0 {
			if ae, ok := body.(*apiError); ok {
				status = ae.status
			}
		}
		raw := marshalReply(body)
		if kept(status) {
			s.idem.finish(e, w.Header().Get("Request-Id"), status, raw)
		} else {
			s.idem.forget(e)
		}
		finished = true
		writeRaw(w, status, raw)
	})
}

// kept reports whether a reply is stored under its Idempotency-Key. As at Stripe, only a
// request that got to run is: a success, a card declined, a server error. A request refused
// before it changed anything (invalid parameters, a missing object, a rate limit) is not, so
// the same key with corrected parameters may be used again.
func kept(status int) bool {
	return status < 400 || status == http.StatusPaymentRequired || status >= 500
}

// apiKey is the secret key of the request ("" when none was sent), or an error for a key this
// simulator does not accept. Stripe takes the key as a bearer token or as the basic-auth user.
// Any test-mode key is accepted, each as an account of its own (see Config.APIKey).
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
	if strings.HasPrefix(key, "sk_test_") && len(key) > len("sk_test_") && len(key) <= 255 && printable(key) {
		return key, nil
	}
	return "", fmt.Errorf("invalid API key provided: %s", maskKey(key))
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// only refuses a request that carries a parameter the route does not know, as Stripe does
// (400 parameter_unknown). A name ending in "[" allows every parameter with that prefix.
func (c *caller) only(names ...string) *apiError {
	for p := range c.form {
		ok := false
		for _, n := range names {
			if p == n || strings.HasSuffix(n, "[") && strings.HasPrefix(p, n) {
				ok = true
				break
			}
		}
		if !ok {
			return badRequest("parameter_unknown", p, "Received unknown parameter: %s", p)
		}
	}
	return nil
}

// stringParam reads an optional string parameter of at most max bytes (Stripe's limit for it).
func (c *caller) stringParam(name string, limit int) (string, *apiError) {
	v := c.get(name)
	if len(v) > limit {
		return "", badRequest("parameter_invalid_string", name, "Invalid %s: must be at most %d characters.", name, limit)
	}
	return v, nil
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

// idempotency keeps the first reply of every (caller, Idempotency-Key) for a while: a second
// request with the key and the same parameters gets that reply byte for byte, whatever its
// status; one with other parameters is refused, and one while the first is still running gets
// a conflict, as at Stripe. At most max keys are kept: past that the oldest finished one goes.
type idempotency struct {
	ttl     time.Duration
	max     int
	mu      sync.Mutex
	m       map[string]*idemEntry
	order   *list.List // of *idemEntry, oldest first
	evicted int64
}

type idemEntry struct {
	key         string
	elem        *list.Element
	inFlight    bool
	fingerprint string
	requestID   string
	status      int
	body        []byte
	at          time.Time
}

type idemState int

const (
	idemNew      idemState = iota // the first request with the key: run it, then finish or forget
	idemInFlight                  // the first is still running
	idemDone                      // the first finished: replay it (same parameters) or refuse
)

func newIdempotency(ttl time.Duration, limit int) *idempotency {
	return &idempotency{ttl: ttl, max: limit, m: map[string]*idemEntry{}, order: list.New()}
}

// begin returns the entry of key and what to do with this request.
func (c *idempotency) begin(key, fingerprint string) (*idemEntry, idemState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for el := c.order.Front(); el != nil; {
		e, next := el.Value.(*idemEntry), el.Next()
		expired := !e.inFlight && now.Sub(e.at) > c.ttl
		if !expired && len(c.m) < c.max {
			break
		}
		if !e.inFlight {
			if !expired {
				c.evicted++
			}
			c.drop(e)
		}
		el = next
	}
	if e, ok := c.m[key]; ok {
		if e.inFlight {
			return e, idemInFlight
		}
		return e, idemDone
	}
	e := &idemEntry{key: key, inFlight: true, fingerprint: fingerprint}
	e.elem = c.order.PushBack(e)
	c.m[key] = e
	return e, idemNew
}

func (c *idempotency) drop(e *idemEntry) {
	delete(c.m, e.key)
	c.order.Remove(e.elem)
}

// finish stores the first request's reply.
func (c *idempotency) finish(e *idemEntry, requestID string, status int, body []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.requestID, e.status, e.body, e.at, e.inFlight = requestID, status, body, time.Now(), false
	c.order.MoveToBack(e.elem)
}

// forget releases a key whose request is not to be replayed.
func (c *idempotency) forget(e *idemEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop(e)
}
